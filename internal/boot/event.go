package boot

import "fmt"

// EventKind says what happened to a PE's boot connection.
type EventKind uint8

const (
	// EventJoined: a PE authenticated and joined the job, or joined it
	// again after a Bye (Init after Finalize; Gen > 1).
	EventJoined EventKind = 1
	// EventExit: a PE asked for GlobalExit(Code).
	EventExit EventKind = 2
	// EventLost: a joined PE's connection dropped without a Bye.
	EventLost EventKind = 3
)

func (k EventKind) String() string {
	switch k {
	case EventJoined:
		return "joined"
	case EventExit:
		return "exit"
	case EventLost:
		return "lost"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one report from the Server to the launcher.
type Event struct {
	Kind EventKind
	Rank int
	Gen  uint64 // the generation of the PE's connection: 1 for its first (see doc.go)
	Code int    // EventExit: the exit code the PE asked for
	Msg  string // EventLost: how the connection ended
}

func (e Event) String() string {
	switch e.Kind {
	case EventExit:
		return fmt.Sprintf("rank %d: exit with code %d", e.Rank, e.Code)
	case EventLost:
		return fmt.Sprintf("rank %d: lost (%s)", e.Rank, e.Msg)
	}
	if e.Kind == EventJoined && e.Gen > 1 {
		return fmt.Sprintf("rank %d: joined generation %d", e.Rank, e.Gen)
	}
	return fmt.Sprintf("rank %d: %v", e.Rank, e.Kind)
}
