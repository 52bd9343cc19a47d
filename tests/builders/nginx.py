"""An nginx reverse proxy in front of several `mercato serve` processes, for one test.

The configuration is the one docs/deployment.md describes, with every path in a temp dir, run
in the foreground (`nginx -c <conf> -g 'daemon off;'`) on a free port.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from builders.platform_process import LiveProcess, free_port


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


def nginx_conf(workdir: Path, *, listen: int, upstreams: list[int]) -> str:
    servers = "\n".join(f"        server 127.0.0.1:{port} max_fails=0;" for port in upstreams)
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"""{user}worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log {workdir}/access.log;
    client_body_temp_path {workdir}/client_body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;

    map $http_x_request_id $mercato_request_id {{
        default $http_x_request_id;
        ""      $request_id;
    }}
    upstream mercato {{
{servers}
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{listen};
        client_max_body_size 1m;
        location = /metrics {{
            allow 127.0.0.1;
            deny all;
            proxy_pass http://mercato;
        }}
        location / {{
            proxy_pass http://mercato;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Request-Id $mercato_request_id;
            proxy_read_timeout 60s;
            proxy_next_upstream error timeout;
        }}
    }}
}}
"""


class Nginx(LiveProcess):
    """nginx in the foreground with its config, pid and logs under `workdir`."""

    what = "nginx"

    def __init__(self, binary: str, workdir: Path, upstreams: list[int]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.conf = workdir / "nginx.conf"
        self.conf.write_text(nginx_conf(workdir, listen=port, upstreams=upstreams))
        check = subprocess.run(
            [binary, "-t", "-c", str(self.conf)], capture_output=True, text=True, check=False
        )
        assert check.returncode == 0, check.stderr
        args = [binary, "-c", str(self.conf), "-g", "daemon off;"]
        super().__init__(args, workdir / "stderr.log", port=port)
