package rnet

import "github.com/rnet-dev/rnet/internal/stream"

// What the rest of package rnet (the device's queue pair, its poll group,
// the listeners) takes from the connection driver under its own names.

// queuePair is a queue pair as the connection driver drives it.
type queuePair = stream.QueuePair

// eventHandler receives the transport's events for one connection.
type eventHandler = stream.EventHandler

// creditClaimer and softwarePoster are the optional interfaces of a
// queuePair that verbsQP has.
type (
	creditClaimer  = stream.CreditClaimer
	softwarePoster = stream.SoftwarePoster
)

// completionBatch is how many completions one step polls.
const completionBatch = stream.CompletionBatch

// maxStepRounds bounds the crossings of one step.
const maxStepRounds = stream.MaxStepRounds

// deadline is a settable point in time whose passing closes a channel.
type deadline = stream.Deadline

func newDeadline(expired func()) *deadline { return stream.NewDeadline(expired) }

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
