from ..cache.cli import run_tool
from .cli import main

run_tool(main, "python -m tack.site")
