"""Deterministic offline stand-ins: a real retrieval baseline and a lexical judge.

Both read the exact prompt a real model or judge would get, so the offline default run
goes through the same prompt building, wire format, cache and parsing as a paid one.
"""
