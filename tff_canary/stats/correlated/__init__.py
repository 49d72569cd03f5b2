"""DP-FTRL: the tree's correlated noise, statistics that use it, its accounting and its audit."""
