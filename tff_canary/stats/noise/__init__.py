"""The noise self-test: is the released noise the Gaussian noise that was
claimed?"""
