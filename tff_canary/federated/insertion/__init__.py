"""Inserting canaries into DP-FedAvg: the aggregation factory, its TFF
process, canary directions, seeded queries and canary clients."""
