"""The command line: argparse lives here and nowhere else; the entry point is main.main."""
