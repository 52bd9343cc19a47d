"""The platform wheel's own checks, run by `scripts/wheels` where `mercato` is installed from its
wheel (with the two SDK wheels it requires) and nothing else: every module imports, the data
files ship, the console script runs. The behaviour itself is the main suite's business."""
