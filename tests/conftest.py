"""Set-up every test layer needs before any module of the test library is imported."""

import pytest

# Failed asserts in the test library report their operands as a test's own do: pytest rewrites
# test and conftest modules only, unless told before the import.
pytest.register_assert_rewrite("tests.support")
