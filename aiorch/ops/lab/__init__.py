"""The replay lab: fork recorded runs from a state onto a candidate variant (and onto their own
settings, the baseline), and report what changed."""
