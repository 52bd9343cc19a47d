"""The Model Context Protocol endpoint `/mcp` (DESIGN §12): every published version a tool."""
