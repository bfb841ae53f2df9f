"""The report's statistics: intervals, paired tests and agreement (stats), judge noise and its split (noise)."""
