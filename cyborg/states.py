"""The accelerator request (ARQ) state machine: one table, used everywhere.

An ARQ is created ``Initial``. Binding moves it to ``BindStarted`` (the API,
atomically, before handing the work to a conductor) and then to ``Bound`` or
``BindFailed`` (the conductor). Unbinding frees its attach handle and leaves
it ``Unbound``, or ``UnbindFailed`` if the device could not be released.
Deleting passes through ``Deleting`` so that a crash mid-delete is visible
and finished later. Nova reads ``Bound``, ``BindFailed`` and ``Deleting`` as
resolved.

Every change of state in the database is a compare-and-set: ``UPDATE ...
WHERE state IN sources(event)``, so two actors can never both win.
"""

from automaton import machines

from cyborg import exception

INITIAL = 'Initial'
BIND_STARTED = 'BindStarted'
BOUND = 'Bound'
BIND_FAILED = 'BindFailed'
UNBOUND = 'Unbound'
UNBIND_FAILED = 'UnbindFailed'
DELETING = 'Deleting'

STATES = (INITIAL, BIND_STARTED, BOUND, BIND_FAILED, UNBOUND, UNBIND_FAILED,
          DELETING)
RESOLVED = frozenset({BOUND, BIND_FAILED, DELETING})

BIND = 'bind'
BIND_SUCCEEDED = 'bind_succeeded'
BIND_FAILED_EVENT = 'bind_failed'
UNBIND = 'unbind'
UNBIND_FAILED_EVENT = 'unbind_failed'
DELETE = 'delete'

# (event, from, to). Nova may unbind while a bind is still running (it gave
# up waiting): the bind's own compare-and-set then loses, as it should.
TRANSITIONS = (
    (BIND, INITIAL, BIND_STARTED),
    (BIND, UNBOUND, BIND_STARTED),
    (BIND_SUCCEEDED, BIND_STARTED, BOUND),
    (BIND_FAILED_EVENT, BIND_STARTED, BIND_FAILED),
    (UNBIND, BIND_STARTED, UNBOUND),
    (UNBIND, BOUND, UNBOUND),
    (UNBIND, BIND_FAILED, UNBOUND),
    (UNBIND, UNBIND_FAILED, UNBOUND),
    (UNBIND_FAILED_EVENT, BOUND, UNBIND_FAILED),
) + tuple((DELETE, state, DELETING) for state in STATES
          if state != DELETING)

_NEXT = {(source, event): target for event, source, target in TRANSITIONS}


def _checked_machine():
    """The table as an automaton machine, which refuses ambiguity."""
    machine = machines.FiniteMachine()
    for state in STATES:
        machine.add_state(state)
    machine.default_start_state = INITIAL
    for event, source, target in TRANSITIONS:
        machine.add_transition(source, target, event)
    machine.freeze()
    return machine


MACHINE = _checked_machine()


class InvalidTransition(exception.Conflict):
    code = 'cyborg.arq.invalid_state'


def next_state(state, event):
    """Where ``event`` takes an ARQ in ``state``; InvalidTransition if
    nowhere.
    """
    target = _NEXT.get((state, event))
    if target is None:
        allowed = sorted(sources(event))
        raise InvalidTransition(
            'An accelerator request in state %s cannot %s; that needs one '
            'of the states %s.' % (state, event.replace('_', ' '),
                                   ', '.join(allowed)))
    return target


def sources(event):
    """The states from which ``event`` may start: the compare-and-set's
    ``WHERE state IN (...)``.
    """
    return frozenset(source for e, source, _ in TRANSITIONS if e == event)


def is_resolved(state):
    return state in RESOLVED
