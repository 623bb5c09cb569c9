"""Reading logs: the reader, the prefilter engines, the scanner, the formats and aggregation."""
