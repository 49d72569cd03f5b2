"""Point estimates of epsilon from canary statistics, and the exact null law
they rest on."""
