"""Tests proving the real-server harness (tests/servers/) does what the later suites rely on."""
