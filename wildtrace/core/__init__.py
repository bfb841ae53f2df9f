"""The benchmark's spec as pure functions over plain data.

Nothing in this package performs I/O or imports an I/O library (httpx, mlflow,
hydra, omegaconf, tqdm, os, pathlib): tests/e2e/test_architecture.py enforces it.
"""
