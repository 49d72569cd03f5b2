"""What one run's canaries say: every estimate and bound of its cosine table
in one call, and the audit of a claimed epsilon."""
