"""The ARQ state machine table."""

import pytest

from cyborg import exception
from cyborg import states

ALL_EVENTS = sorted({event for event, _, _ in states.TRANSITIONS})


def test_bind_flow():
    state = states.INITIAL
    for event, expected in ((states.BIND, states.BIND_STARTED),
                            (states.BIND_SUCCEEDED, states.BOUND),
                            (states.UNBIND, states.UNBOUND),
                            (states.BIND, states.BIND_STARTED),
                            (states.BIND_FAILED_EVENT, states.BIND_FAILED),
                            (states.DELETE, states.DELETING)):
        state = states.next_state(state, event)
        assert state == expected


@pytest.mark.parametrize('state', states.STATES)
@pytest.mark.parametrize('event', ALL_EVENTS)
def test_every_pair_is_either_in_the_table_or_refused(state, event):
    allowed = (state, event) in {(s, e) for e, s, _ in states.TRANSITIONS}
    if allowed:
        assert states.next_state(state, event) in states.STATES
        assert state in states.sources(event)
    else:
        with pytest.raises(states.InvalidTransition) as refused:
            states.next_state(state, event)
        assert state not in states.sources(event)
        assert isinstance(refused.value, exception.Conflict)
        assert refused.value.status == 409
        assert state in refused.value.message


def test_the_automaton_machine_agrees_with_the_table():
    for event, source, target in states.TRANSITIONS:
        machine = states.MACHINE.copy()
        machine.initialize(source)
        machine.process_event(event)
        assert machine.current_state == target


def test_nothing_leaves_deleting_and_everything_else_can_be_deleted():
    assert states.sources(states.DELETE) == (
        set(states.STATES) - {states.DELETING})
    for event in ALL_EVENTS:
        assert states.DELETING not in states.sources(event)


def test_resolved_states_are_the_ones_nova_waits_for():
    assert {s for s in states.STATES if states.is_resolved(s)} == {
        'Bound', 'BindFailed', 'Deleting'}
    assert not states.is_resolved(states.BIND_STARTED)


def test_only_a_started_bind_can_finish():
    assert states.sources(states.BIND_SUCCEEDED) == {states.BIND_STARTED}
    assert states.sources(states.BIND_FAILED_EVENT) == {states.BIND_STARTED}
