"""The built-in tools and their path policy: what is readable, what is refused, and what the model sees."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentkernel
from agentkernel.tools import Tool, invoke
from agentkernel.tools import files as file_tools_module
from agentkernel.tools.files import FILE_TOOL_NAMES, MAX_OUTPUT_CHARS, PACKAGE_DIR, PathPolicy, file_tools


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return 42\n")
    (root / "notes.txt").write_text("hello\nworld\n")
    (tmp_path / "secret.txt").write_text("top secret\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "inner.txt").write_text("outside the root\n")
    return root


def tools_for(root: Path | PathPolicy) -> dict[str, Tool]:
    return {t.name: t for t in file_tools(root)}


def call(root: Path | PathPolicy, name: str, **kwargs: object) -> str:
    return asyncio.run(invoke(tools_for(root)[name], kwargs))


# -- names and schemas ---------------------------------------------------------------------------------------


def test_tool_names_and_schemas() -> None:
    tools = file_tools()
    assert tuple(t.name for t in tools) == FILE_TOOL_NAMES == ("read_file", "list_dir", "search_text")
    assert all(t.read_only for t in tools)
    params = {t.name: t.schema()["parameters"] for t in tools}
    assert params["read_file"]["required"] == ["path"]
    assert params["read_file"]["properties"]["path"]["type"] == "string"
    nullable_integer = [{"type": "integer"}, {"type": "null"}]  # `int | None = None`
    assert params["read_file"]["properties"]["offset"]["anyOf"] == nullable_integer
    assert params["read_file"]["properties"]["limit"]["anyOf"] == nullable_integer
    assert params["list_dir"]["required"] == []
    assert params["list_dir"]["properties"]["path"]["default"] == "."
    assert params["search_text"]["required"] == ["pattern"]
    assert params["search_text"]["properties"]["path"]["default"] == "."
    for t in tools:
        assert t.description and "Args:" not in t.description
        assert all(p.get("description") for p in t.parameters["properties"].values())


def test_module_level_tools_are_tools_bound_to_the_working_directory(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(file_tools_module.read_file, Tool) and file_tools_module.read_file.name == "read_file"
    assert isinstance(file_tools_module.list_dir, Tool) and isinstance(file_tools_module.search_text, Tool)
    monkeypatch.chdir(project)
    assert file_tools_module.read_file.fn("notes.txt") == "hello\nworld"
    monkeypatch.chdir(project / "src")
    assert file_tools_module.list_dir.fn() == "app.py"
    with pytest.raises(FileNotFoundError):
        file_tools_module.read_file.fn("notes.txt")


def test_builtin_tools_accepts_a_policy(project: Path) -> None:
    read = file_tools(PathPolicy(project, max_file_bytes=5))[0]
    with pytest.raises(ValueError, match="12 bytes, over the 5-byte limit"):
        read.fn("notes.txt")


# -- the path policy -----------------------------------------------------------------------------------------


def test_reads_a_file_under_the_root(project: Path) -> None:
    assert call(project, "read_file", path="src/app.py") == "import os\n\ndef main():\n    return 42"
    assert call(project, "read_file", path="./src/../notes.txt") == "hello\nworld"


@pytest.mark.parametrize("path", ["../secret.txt", "src/../../secret.txt", "../outside/inner.txt", ".."])
def test_refuses_dotdot_escapes(project: Path, path: str) -> None:
    with pytest.raises(PermissionError, match="outside the project root") as info:
        call(project, "read_file", path=path)
    assert str(project) not in str(info.value)  # the message names the path given, not where the root is


def test_refuses_absolute_paths_outside_the_root_but_admits_those_inside(project: Path) -> None:
    with pytest.raises(PermissionError, match="outside the project root"):
        call(project, "read_file", path=str(project.parent / "secret.txt"))
    with pytest.raises(PermissionError):
        call(project, "read_file", path="/etc/passwd")
    with pytest.raises(PermissionError):
        call(project, "list_dir", path="/")
    assert call(project, "read_file", path=str(project / "notes.txt")) == "hello\nworld"


def test_refuses_symlinks_out_of_the_root(project: Path) -> None:
    (project / "leak.txt").symlink_to(project.parent / "secret.txt")
    (project / "leakdir").symlink_to(project.parent / "outside", target_is_directory=True)
    with pytest.raises(PermissionError, match="'leak.txt' is outside the project root"):
        call(project, "read_file", path="leak.txt")
    with pytest.raises(PermissionError):
        call(project, "read_file", path="leakdir/inner.txt")
    with pytest.raises(PermissionError):
        call(project, "list_dir", path="leakdir")
    with pytest.raises(PermissionError):
        call(project, "search_text", pattern="secret", path="leak.txt")
    # A search of the whole project neither follows the file link out nor enters the linked directory.
    assert call(project, "search_text", pattern="secret|outside") == "no matches for 'secret|outside' in '.'"


def test_admits_symlinks_that_stay_inside_the_root(project: Path) -> None:
    (project / "alias.py").symlink_to(project / "src" / "app.py")
    (project / "code").symlink_to(project / "src", target_is_directory=True)
    assert call(project, "read_file", path="alias.py").startswith("import os")
    assert call(project, "read_file", path="code/app.py").endswith("return 42")
    assert call(project, "list_dir", path="code") == "app.py"
    assert "alias.py:4: return 42" in call(project, "search_text", pattern="42")


def test_a_symlinked_root_works_and_outputs_stay_relative(project: Path) -> None:
    alias = project.parent / "alias-root"
    alias.symlink_to(project, target_is_directory=True)
    assert call(alias, "read_file", path=str(alias / "notes.txt")) == "hello\nworld"
    assert call(alias, "search_text", pattern="42") == "src/app.py:4: return 42"
    with pytest.raises(PermissionError):
        call(alias, "read_file", path="../secret.txt")


SEGMENTS = st.sampled_from(["..", ".", "", "src", "app.py", "agentkernel", "models", "leak", "leakdir", "inner.txt",
                            "secret.txt", "outside", "project", "etc", "passwd"])


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(SEGMENTS, min_size=1, max_size=7), absolute=st.booleans())
def test_nothing_outside_the_root_or_package_is_ever_admitted(project: Path, parts: list[str], absolute: bool) -> None:
    if not (project / "leak").is_symlink():
        (project / "leak").symlink_to(project.parent / "secret.txt")
        (project / "leakdir").symlink_to(project.parent / "outside", target_is_directory=True)
    path = "/".join(parts)
    if absolute:
        path = str(project / path)
    try:
        real = PathPolicy(project).resolve(path)
    except (PermissionError, FileNotFoundError):
        return
    assert real.is_relative_to(project.resolve()) or (
        real.is_relative_to(PACKAGE_DIR) and path.lstrip("./").startswith("agentkernel")
    )
    assert real.exists()


def test_refuses_nul_bytes_in_paths(project: Path) -> None:
    for name in ("read_file", "list_dir"):
        with pytest.raises(ValueError, match="NUL byte"):
            call(project, name, path="notes.txt\x00.png")
    with pytest.raises(ValueError, match="NUL byte"):
        call(project, "search_text", pattern="x", path="src\x00")


def test_missing_files_and_wrong_kinds(project: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file or directory: 'nope.txt'"):
        call(project, "read_file", path="nope.txt")
    with pytest.raises(FileNotFoundError):
        call(project, "list_dir", path="nope")
    with pytest.raises(IsADirectoryError, match="'src' is a directory; use list_dir"):
        call(project, "read_file", path="src")
    with pytest.raises(NotADirectoryError, match="use read_file"):
        call(project, "list_dir", path="notes.txt")


def test_symlink_loops_are_refused_without_absolute_paths(project: Path) -> None:
    (project / "a").symlink_to(project / "b")
    (project / "b").symlink_to(project / "a")
    with pytest.raises(ValueError, match="'a' cannot be resolved") as info:
        call(project, "read_file", path="a")
    assert str(project) not in str(info.value)
    assert call(project, "search_text", pattern="hello") == "notes.txt:1: hello"
    assert call(project, "list_dir").splitlines() == ["a", "b", "notes.txt", "src/"]


def test_os_errors_name_the_relative_path_only(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(path: object, *args: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))  # what the OS raises, absolute path included

    monkeypatch.setattr(file_tools_module, "read_text_file", denied)
    monkeypatch.setattr(os, "scandir", denied)
    with pytest.raises(PermissionError) as info:
        call(project, "read_file", path="notes.txt")
    assert str(info.value) == "cannot read 'notes.txt': Permission denied"
    with pytest.raises(PermissionError) as info:
        call(project, "list_dir", path="src")
    assert str(info.value) == "cannot read 'src': Permission denied"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_refuses_special_files_instead_of_blocking(project: Path) -> None:
    os.mkfifo(project / "pipe")
    with pytest.raises(ValueError, match="not a regular file"):
        call(project, "read_file", path="pipe")
    assert "skipped 1" in call(project, "search_text", pattern="hello")


def test_refuses_binary_files(project: Path) -> None:
    (project / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (project / "latin1.txt").write_bytes("café au lait\n".encode("latin-1"))
    with pytest.raises(ValueError, match="'image.png' is a binary file"):
        call(project, "read_file", path="image.png")
    with pytest.raises(ValueError, match="'latin1.txt' is not UTF-8 text"):
        call(project, "read_file", path="latin1.txt")
    with pytest.raises(ValueError, match="binary"):
        call(project, "read_file", path="image.png", offset=1, limit=1)


def test_refuses_whole_reads_of_huge_files_but_reads_parts(project: Path) -> None:
    line = "x" * 99 + "\n"
    (project / "big.log").write_text(line * 12_000)  # 1.2 MB
    with pytest.raises(ValueError) as info:
        call(project, "read_file", path="big.log")
    message = str(info.value)
    assert "1,200,000 bytes" in message and "1,000,000-byte limit" in message
    assert "offset and limit" in message
    part = call(project, "read_file", path="big.log", offset=11_999, limit=5).splitlines()
    assert part == ["x" * 99] * 2 + ["[lines 11999-12000 of a 1,200,000-byte file; pass offset=12001 for more]"]
    with pytest.raises(ValueError, match="past the end"):
        call(project, "read_file", path="big.log", offset=20_000, limit=5)
    # search_text skips it rather than reading a huge file
    assert call(project, "search_text", pattern="xxx") == (
        "no matches for 'xxx' in '.'\n[skipped 1 binary, oversized or unreadable files]"
    )


# -- read_file: offset, limit, caps --------------------------------------------------------------------------


@pytest.fixture
def numbered(project: Path) -> Path:
    (project / "lines.txt").write_text("".join(f"line {n}\n" for n in range(1, 951)))
    return project


def test_offset_is_one_based_and_limit_counts_lines(numbered: Path) -> None:
    out = call(numbered, "read_file", path="lines.txt", offset=1, limit=200)
    lines = out.splitlines()
    assert lines[0] == "line 1" and lines[199] == "line 200"
    assert lines[-1] == "[lines 1-200 of 950; pass offset=201 for more]"
    out = call(numbered, "read_file", path="lines.txt", offset=941)
    assert out.splitlines() == [f"line {n}" for n in range(941, 951)] + ["[lines 941-950 of 950]"]
    assert call(numbered, "read_file", path="lines.txt", offset=0, limit=1) == call(
        numbered, "read_file", path="lines.txt", limit=1
    )
    out = call(numbered, "read_file", path="lines.txt", offset=5, limit=1)
    assert out == "line 5\n[lines 5-5 of 950; pass offset=6 for more]"


def test_bad_offsets_and_limits(numbered: Path) -> None:
    with pytest.raises(ValueError, match="offset 951 is past the end of 'lines.txt', which has 950 lines"):
        call(numbered, "read_file", path="lines.txt", offset=951)
    with pytest.raises(ValueError, match="limit must be at least 1"):
        call(numbered, "read_file", path="lines.txt", limit=0)
    with pytest.raises(ValueError, match="offset"):
        call(numbered, "read_file", path="lines.txt", offset=-3)


def test_output_is_capped_in_characters(project: Path) -> None:
    (project / "wide.txt").write_text(("y" * 999 + "\n") * 100)
    out = call(project, "read_file", path="wide.txt")
    assert len(out) <= MAX_OUTPUT_CHARS + 100
    assert out.endswith("[lines 1-20 of 100; pass offset=21 for more]")
    (project / "minified.js").write_text("z" * 50_000)
    out = call(project, "read_file", path="minified.js")
    assert out.endswith(f"\n[line 1 is 50,000 characters; showing the first {MAX_OUTPUT_CHARS:,}]")


def test_small_and_empty_files_come_back_whole(project: Path) -> None:
    (project / "empty.txt").write_text("")
    (project / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    assert call(project, "read_file", path="empty.txt") == "[empty file]"
    assert call(project, "read_file", path="crlf.txt") == "a\nb"


# -- self-inspection -----------------------------------------------------------------------------------------


def test_reads_its_own_source_from_any_root(project: Path) -> None:
    source = Path(file_tools_module.__file__).read_text()
    lines = call(project, "read_file", path="agentkernel/tools/files.py").splitlines()
    if lines[-1].startswith("[lines 1-"):  # the module outgrew the output cap: a first page and a note
        lines.pop()
    assert len(lines) > 100 and lines == source.splitlines()[: len(lines)]
    first_page = call(project, "read_file", path="agentkernel/tools/files.py", limit=3)
    assert first_page.splitlines()[:3] == source.splitlines()[:3]
    assert "tools/" in call(project, "list_dir", path="agentkernel").splitlines()
    assert "models/" in call(project, "list_dir", path="agentkernel/").splitlines()
    hits = call(project, "search_text", pattern="^class PathPolicy", path="agentkernel")
    assert hits.startswith("agentkernel/tools/files.py:") and str(Path(file_tools_module.__file__).parent) not in hits


def test_self_inspection_reads_the_whole_module_in_pages(project: Path) -> None:
    source = Path(file_tools_module.__file__).read_text().splitlines()
    pages: list[str] = []
    offset = 1
    while offset <= len(source):
        out = call(project, "read_file", path="agentkernel/tools/files.py", offset=offset, limit=100)
        pages += out.splitlines()[:-1]
        offset += 100
    assert pages == source


@pytest.mark.parametrize("path", [
    "agentkernel/../../etc/passwd",
    "agentkernel/../../../../../../../../etc/passwd",
])
def test_self_inspection_cannot_escape_the_package(project: Path, path: str) -> None:
    with pytest.raises(PermissionError, match="outside the project root"):
        call(project, "read_file", path=path)


def test_self_inspection_stops_at_the_package_directory(project: Path) -> None:
    # Under the root this names project/pyproject.toml (missing); in the package it would leave the package.
    with pytest.raises(FileNotFoundError):
        call(project, "read_file", path="agentkernel/models/../../pyproject.toml")


def test_self_inspection_is_only_for_relative_agentkernel_paths(project: Path) -> None:
    with pytest.raises(FileNotFoundError):
        call(project, "read_file", path="file_tools.py")
    with pytest.raises(FileNotFoundError, match="no such file or directory: 'agentkernel/nope.py'"):
        call(project, "read_file", path="agentkernel/nope.py")
    with pytest.raises(PermissionError):
        call(project, "read_file", path=str(Path(file_tools_module.__file__)))


def test_the_roots_own_agentkernel_folder_wins(project: Path) -> None:
    (project / "agentkernel" / "tools").mkdir(parents=True)
    (project / "agentkernel" / "tools" / "files.py").write_text("# the project's own file\n")
    assert call(project, "read_file", path="agentkernel/tools/files.py") == "# the project's own file"
    assert call(project, "list_dir", path="agentkernel") == "tools/"


def test_a_root_agentkernel_symlink_out_is_refused_not_replaced(project: Path) -> None:
    (project.parent / "outside" / "tools").mkdir(parents=True)
    (project.parent / "outside" / "tools" / "files.py").write_text("# outside\n")
    (project / "agentkernel").symlink_to(project.parent / "outside", target_is_directory=True)
    with pytest.raises(PermissionError):
        call(project, "read_file", path="agentkernel/tools/files.py")


# -- list_dir and search_text --------------------------------------------------------------------------------


def test_list_dir_sorts_marks_directories_and_keeps_hidden_entries(project: Path) -> None:
    (project / ".git").mkdir()
    (project / ".env").write_text("X=1\n")
    assert call(project, "list_dir").splitlines() == [".env", ".git/", "notes.txt", "src/"]
    (project / "empty").mkdir()
    assert call(project, "list_dir", path="empty") == "[empty directory]"


def test_list_dir_caps_long_listings(project: Path) -> None:
    many = project / "many"
    many.mkdir()
    for n in range(1005):
        (many / f"f{n:04}.txt").touch()
    lines = call(project, "list_dir", path="many").splitlines()
    assert lines[0] == "f0000.txt" and lines[999] == "f0999.txt"
    assert lines[-1] == "[showing 1000 of 1005 entries]"


def test_search_text_finds_regex_matches_with_relative_paths(project: Path) -> None:
    (project / "src" / "util.py").write_text("def helper():\n    return main()\n")
    out = call(project, "search_text", pattern=r"def \w+\(")
    assert out.splitlines() == ["src/app.py:3: def main():", "src/util.py:1: def helper():"]
    assert call(project, "search_text", pattern="main", path="src/util.py") == "src/util.py:2: return main()"
    assert str(project) not in call(project, "search_text", pattern=".", path=str(project / "src"))


def test_search_text_skips_hidden_dirs_and_binary_files(project: Path) -> None:
    (project / ".git").mkdir()
    (project / ".git" / "config").write_text("needle\n")
    (project / "blob.bin").write_bytes(b"needle\x00\x01")
    (project / "found.txt").write_text("a needle here\n")
    out = call(project, "search_text", pattern="needle")
    assert out.splitlines() == ["found.txt:1: a needle here",
                                "[skipped 1 binary, oversized or unreadable files]"]
    assert call(project, "search_text", pattern="needle", path=".git") == ".git/config:1: needle"


def test_search_text_takes_an_invalid_regex_literally(project: Path) -> None:
    (project / "calls.py").write_text("x = f(a, b\n")
    out = call(project, "search_text", pattern="f(a, b")
    header, hit = out.splitlines()
    assert header.startswith("['f(a, b' is not a valid regular expression (missing ),")
    assert header.endswith("searched for it as literal text]")
    assert hit == "calls.py:1: x = f(a, b"


def test_search_text_caps_matches(project: Path) -> None:
    (project / "many.txt").write_text("match\n" * 500)
    lines = call(project, "search_text", pattern="match").splitlines()
    assert len(lines) == 201 and lines[199] == "many.txt:200: match"
    assert lines[-1] == "[showing the first 200 matches; narrow the pattern or the path for more]"


def test_search_text_reports_no_matches(project: Path) -> None:
    assert call(project, "search_text", pattern="zzz", path="src") == "no matches for 'zzz' in 'src'"


# -- inside the loop -----------------------------------------------------------------------------------------


def test_refused_path_is_an_error_output_and_the_run_completes(project: Path) -> None:
    model = agentkernel.ScriptedModel([
        [agentkernel.Call("read_file", {"path": "../secret.txt"}),
         agentkernel.Call("read_file", {"path": "notes.txt"})],
        agentkernel.Call("read_file", {"path": "agentkernel/tools/files.py", "limit": 1}),
        "The notes say hello world.",
    ])
    result = asyncio.run(agentkernel.run("Read the notes.", model=model, tools=file_tools(project)))
    assert result.status == "complete"
    assert result.answer == "The notes say hello world."
    agentkernel.validate_history(result.history)  # raises if a call lacks its output
    outputs = [item["output"] for item in result.history if item["type"] == "function_call_output"]
    assert outputs[0] == "error: PermissionError: path '../secret.txt' is outside the project root"
    assert outputs[1] == "hello\nworld"
    assert outputs[2].startswith('"""The built-in read-only tools')
    assert "top secret" not in str(result.history)
