"""What the run reads and keeps on disk: the response cache and its locks (cache), the dataset files (dataset)."""
