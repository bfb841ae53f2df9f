"""The HTTP stack: one attempt (attempt), the call loop around the pure retry rule (call, retry), pacing at
the rate limit (ratelimit), the cached, reserved, stored call (endpoint), the one way clients are made (client),
keys and redaction (secrets), and the served-model rule (served)."""
