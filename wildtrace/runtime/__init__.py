"""I/O: dataset files, HTTP calls with retry and bounds, the cache, the run itself."""
