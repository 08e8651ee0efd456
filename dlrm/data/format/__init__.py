"""The dataset format: the feature spec and its rules, the feature contract read from it, the split-binary
writer that checks every value, and the error naming where bad input is."""
