from .cli import main, run_tool

run_tool(main, "python -m tack.cache")
