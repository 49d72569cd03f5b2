"""dp_accounting's PLD accountant at a fixed interval (accounting tests only).

The independent reference of the accounting tests: it convolves the privacy
loss distributions of the events it is given, with no shortcut of ours.
"""

import dp_accounting


def pld_epsilon(event, delta, interval):
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=interval)
  accountant.compose(event)
  return accountant.get_epsilon(delta)
