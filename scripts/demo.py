"""Run a teaching notebook headlessly and print what its cells show: ``python scripts/demo.py NOTEBOOK``.

The notebook is executed in a real kernel (in its own folder, as Jupyter would) and is not written back.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path


def show(path: Path) -> int:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            print(textwrap.indent(cell.source.strip(), "  # "), end="\n\n")
            continue
        if cell.cell_type != "code":
            continue
        print(f"In [{cell.get('execution_count') or ' '}]:")
        print(textwrap.indent(cell.source.strip(), "    "))
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                print(output.text.rstrip())
            elif output.output_type == "error":
                print(f"{output.ename}: {output.evalue}")
            else:
                text = output.get("data", {}).get("text/plain", "")
                if text:  # (the panel's display is left with no data)
                    print(text.rstrip())
        print()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python scripts/demo.py NOTEBOOK.ipynb", file=sys.stderr)
        return 2
    path = Path(args[0])
    if not path.is_file():
        print(f"no such notebook: {path}", file=sys.stderr)
        return 2
    return show(path)


if __name__ == "__main__":
    sys.exit(main())
