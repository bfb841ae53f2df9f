"""Before a paid run: one small call per endpoint (preflight) and the providers' model lists (catalog)."""
