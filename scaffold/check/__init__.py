"""`scaffold check`: find the silent training-loop bugs of loop-rules.md in Python source."""
