"""Done-when: truncated output, output of the wrong command, a prompt in the middle, binary junk and
a 50 MB response each end in quarantine with a reason (whole, with command and platform); the
parser never raises, so the run continues."""

from __future__ import annotations

from functools import cache

import pytest

from connectors.ssh.parsers import CliParse, parse_output
from connectors.ssh.platforms import command_for
from simulator.generator import generate
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from simulator.ssh.render import outputs_for


@cache
def outputs() -> dict[str, tuple[str, str]]:
    return outputs_for(generate(load_spec(resolve_spec_path("h100-1su"))))


def parse(name: str, text: str | bytes) -> CliParse:
    platform = outputs()[name][0]
    return parse_output(text, command_for(platform), name)


def only_reason(result: CliParse, name: str) -> str:
    assert result.neighbors == []
    (q,) = result.quarantined
    spec = command_for(outputs()[name][0])
    assert (q.source, q.device, q.location) == ("cli", name, "output")
    assert (q.context["command"], q.context["platform"]) == (spec.command, spec.platform)
    return q.reason


def test_good_outputs_parse() -> None:
    counts = {name: len(parse(name, text).neighbors) for name, (_, text) in outputs().items()}
    assert counts == {
        "eth-leaf-01": 10,
        "eth-leaf-02": 10,
        "eth-leaf-03": 10,
        "eth-leaf-04": 10,
        "eth-spine-01": 4,
        "eth-spine-02": 4,
    }


def test_truncated_json_is_quarantined_whole() -> None:
    text = outputs()["eth-leaf-01"][1]
    reason = only_reason(parse("eth-leaf-01", text[:3000]), "eth-leaf-01")
    assert reason.startswith("unparseable 'show lldp neighbors detail | json' output: not JSON (")
    cut = outputs()["eth-spine-02"][1][:1881]
    assert only_reason(parse("eth-spine-02", cut), "eth-spine-02").startswith("unparseable lldpctl -f json output: ")


def test_truncated_text_is_quarantined() -> None:
    text = outputs()["eth-spine-01"][1]
    # cut mid-line: the partial line matches no rule of the template -> the whole output
    mid_line = text[: text.index("Remote port-id: Eth1/47") + len("Remote port-id: Eth1/")]
    assert only_reason(parse("eth-spine-01", mid_line), "eth-spine-01") == (
        "unparseable 'show lldp interfaces ethernet remote' output: TextFSM: TextFSMError: State Error raised. "
        "Rule Line: 30. Input Line: Remote port-id: Eth1/"
    )
    # cut right after a block's interface line: the complete blocks land, the cut one is quarantined
    result = parse("eth-spine-01", text[: text.index("\nEth1/4\n") + len("\nEth1/4\n")])
    assert [n.local_port for n in result.neighbors] == ["Ethernet1/1", "Ethernet1/2", "Ethernet1/3"]
    (q,) = result.quarantined
    assert q.reason == (
        "bad neighbour on Eth1/4: no chassis id, no port id and no system name: nothing identifies the neighbour"
    )


@pytest.mark.parametrize(
    ("name", "other", "reason"),
    [
        (
            "eth-leaf-01",
            "eth-leaf-02",
            "unparseable 'show lldp neighbors detail | json' output: JSON is not "
            "'show lldp neighbors detail | json' output: missing 'lldpNeighbors'",
        ),
        (
            "eth-leaf-02",
            "eth-leaf-01",
            "unparseable 'show lldp neighbors detail | json' output: JSON is not "
            "'show lldp neighbors detail | json' output: missing 'TABLE_nbor_detail'",
        ),
        (
            "eth-leaf-03",
            "eth-leaf-01",
            "unparseable 'show lldp neighbors | display json' output: JSON is not "
            "'show lldp neighbors | display json' output: missing 'lldp-neighbors-information'",
        ),
        (
            "eth-spine-02",
            "eth-leaf-01",
            "unparseable lldpctl -f json output: not lldpctl JSON: no top-level 'lldp' object",
        ),
        (
            "eth-spine-01",
            "eth-leaf-01",
            "unparseable 'show lldp interfaces ethernet remote' output: TextFSM: "
            "TextFSMError: State Error raised. Rule Line: 16. Input Line: {",
        ),
    ],
)
def test_output_of_another_command_is_quarantined_whole(name: str, other: str, reason: str) -> None:
    assert only_reason(parse(name, outputs()[other][1]), name) == reason


def test_cli_error_is_quarantined_whole() -> None:
    text = "% Invalid input detected at '^' marker.\n"
    assert only_reason(parse("eth-leaf-01", text), "eth-leaf-01") == (
        "the CLI answered with an error: \"% Invalid input detected at '^' marker.\""
    )


def test_prompt_in_the_middle_is_quarantined_whole() -> None:
    text = outputs()["eth-leaf-03"][1]
    half = len(text) // 2
    spliced = text[:half] + "\ngpufabric@eth-leaf-03> show lldp neighbors | display json\n" + text[half:]
    assert only_reason(parse("eth-leaf-03", spliced), "eth-leaf-03") == (
        "a CLI prompt in the middle of the output: 'gpufabric@eth-leaf-03> show'"
    )


def test_binary_junk_is_quarantined_whole() -> None:
    assert only_reason(parse("eth-leaf-02", bytes(range(256))), "eth-leaf-02") == (
        "binary output: not UTF-8 at byte 128"
    )
    text = outputs()["eth-leaf-02"][1]
    assert only_reason(parse("eth-leaf-02", text[:100] + "\x00\x01" + text[100:]), "eth-leaf-02") == (
        "binary output: 2 control or undecodable characters"
    )


def test_fifty_megabytes_is_quarantined_whole_and_clipped() -> None:
    big = "x" * (50 * 1024 * 1024)
    result = parse("eth-spine-01", big)
    assert only_reason(result, "eth-spine-01") == "output of 52428800 bytes exceeds the 8388608-byte limit"
    assert len(result.quarantined[0].payload) == 1024 * 1024
    assert result.quarantined[0].context["truncated_payload"] is True


def test_empty_table_is_no_data_not_an_error() -> None:
    result = parse("eth-leaf-02", "")
    assert (result.neighbors, result.quarantined) == ([], [])
