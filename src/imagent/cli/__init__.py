"""The ``imagent`` command (Typer): a thin shell over :mod:`imagent.api` (``imagent index | search | eval | score |
models | config | serve | demo | oscar | skills``). :mod:`~imagent.cli.main` holds the app and the index/search
commands; the other modules one command group each; :mod:`~imagent.cli.common` the error and option helpers.
"""
