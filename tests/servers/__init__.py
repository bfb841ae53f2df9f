"""Real servers the tests start on 127.0.0.1: scripted HTTP (loopback) and PostgreSQL (pg)."""
