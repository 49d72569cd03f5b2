"""The cosine audit of DP-FedAvg and distributed DP: base, report section, figures.

The family's base (`spec.CosineMechanism`), its report section (`report`)
and its figures (`plots`).
"""
