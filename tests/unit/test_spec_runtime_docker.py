"""study_runtime.yaml's `docker:` section is strict: an unknown key, a wrong type or a bad value
is one error naming the file, the line and the field."""

from __future__ import annotations

import pytest

from cairn.errors import InvalidInput
from cairn.spec.runtime import DockerPolicy, parse_study_runtime

FILE = "local/study_runtime.yaml"


def load(docker: str) -> DockerPolicy | None:
    text = f"format: 1\nstudies:\n  lung:\n    images: {{default: cairn/worker:1}}\n{docker}"
    return parse_study_runtime(text, FILE, "/srv").studies["lung"].docker


def test_a_complete_docker_section_loads() -> None:
    policy = load("    docker:\n      network: host\n      shm_size: 1g\n      user: '1000:1000'\n"
                  "      runtime: nvidia\n")
    assert policy == DockerPolicy(network="host", shm_size="1g", user="1000:1000",
                                  runtime="nvidia")
    assert load("") is None


@pytest.mark.parametrize(("section", "line", "field", "problem"), [
    ("    docker:\n      network: host\n      privileged: true\n", 6, "studies.lung.docker",
     "unknown field 'privileged'"),
    ("    docker:\n      network: 3\n", 5, "studies.lung.docker.network",
     "expected `str | null`, got `int`"),
    ("    docker: host\n", 4, "studies.lung.docker", "expected `object | null`, got `str`"),
    ("    docker:\n      shm_size: lots\n", 5, "studies.lung.docker.shm_size",
     "'lots' is not a size such as 64m or 1g"),
    ("    docker:\n      user: 'root; rm -rf /'\n", 5, "studies.lung.docker.user",
     "is not uid[:gid] or a user name"),
    ("    docker:\n      network: 'host --privileged'\n", 5, "studies.lung.docker.network",
     "is not a network mode"),
])
def test_a_bad_docker_section_names_file_line_and_field(section: str, line: int, field: str,
                                                        problem: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        load(section)
    text = str(caught.value)
    assert text.startswith(f"{FILE}:"), text
    assert problem in text and (caught.value.field or "").startswith(field), text
    assert caught.value.line is not None and abs(caught.value.line - line) <= 1, text
