"""Test support that is not a builder: the fault simulation and the crash suite's entry points."""
