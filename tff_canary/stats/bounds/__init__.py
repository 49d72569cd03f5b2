"""Lower bounds on epsilon that hold with a stated confidence, and how a bound
maximized over thresholds pays for the choice."""
