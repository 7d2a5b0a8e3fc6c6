package stream

import (
	"errors"
	"testing"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/wr"
)

// TestSimProtocolErrorTellsThePeer: a connection that a peer's protocol
// error ends takes its queue pair down at once, as the keepalive's give-up
// does, so the peer learns that the stream is over while our application
// still holds the connection open.
func TestSimProtocolErrorTellsThePeer(t *testing.T) {
	c, s := simPipe(t, nil)
	defer c.Close()
	defer s.Close()

	// s's queue pair sends c a message of a reserved opcode, unsignalled
	// so that s's engine never sees its completion.
	bad := []wr.Send{{Op: wr.OpWriteImm, Imm: uint32(ring.MakeMsg(ring.MsgRsvd, 0)), Inline: true}}
	if err := endpointOf(s).Endpoint().PostSend(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, ring.ErrProtocol) {
		t.Fatalf("Read after a reserved opcode = %v, want ErrProtocol", err)
	}
	peerToldOfTheEnd(t, s)
}
