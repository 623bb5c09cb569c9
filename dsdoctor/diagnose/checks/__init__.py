"""Rule checks grouped by topic; ``registry.CHECKS`` maps each rule's hook key to its function."""
