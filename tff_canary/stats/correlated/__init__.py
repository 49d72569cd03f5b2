"""Correlated noise as a known linear map of independent node noises (DP-FTRL's tree is one): its statistics, accounting and audit."""
