"""The course's checkpoint, where the course first named it: the three tests of the chapter's promises.

``python -m pytest tests/test_sampling_loop.py`` runs them (``-k repeated`` the second alone):

- ``test_allows_more_than_five_tool_rounds_before_the_final_response``: a task of eight tool rounds completes; no
  round cap cuts it (notebook 1).
- ``test_stops_repeated_identical_tool_call_loops_without_a_global_round_limit``: the same call giving the same
  output stops the run with ``REPEATED_TOOL_CALL`` (notebooks 2 and 3).
- ``test_commits_tool_output_before_fatal_stop``: the last tool output is in the history before the fatal stop, so
  every call has its output (notebook 5).

They live in ``tests/unit/test_sampling_loop.py`` with the loop's other tests; ``tests/conftest.py`` leaves this
module out when the whole tree is collected, so they run once there.
"""

from unit.test_sampling_loop import (  # noqa: F401 - collected here when this module is named
    test_allows_more_than_five_tool_rounds_before_the_final_response,
    test_commits_tool_output_before_fatal_stop,
    test_stops_repeated_identical_tool_call_loops_without_a_global_round_limit,
)
