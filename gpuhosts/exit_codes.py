"""The exit codes of every `gpuhosts` command, one meaning each (as Terraform's `plan -detailed-exitcode` keeps 0, 1
and 2 apart): a script reads any command's status the same way."""

# Done, and nothing to report: a plan written, no change, every unit in sync, a benchmark measured.
OK = 0
# Could not be done: a host, a template, a file, a failed run.
ERROR = 1
# The input is refused before anything is done: an invalid stack, a stack name or an argument that is not one.
INVALID = 2
# Done, and there are differences: `diff` found changes, `check` found drift.
DIFFERENCES = 3
