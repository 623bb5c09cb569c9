"""Output: the analysis in text/JSON/Markdown, the issue body, the issue form."""
