package resume

import (
	"bytes"
	"errors"
	"io"
	"strconv"

	"github.com/rnet-dev/rnet/internal/ring"
)

// Resuming over TCP (docs/design.md, "Resuming over TCP"). A dialer with no
// RDMA path left, to a listener whose reply set TCPFlag, connects over TCP
// to the port it dialled and sends TCPMagic, a length byte and the private
// data of a resume request, the same as over RDMA. The listener answers
// with a status byte: TCPAccepted, then a length byte and its reply's
// private data, the same as a REP's; or a reject reason (6 for a token it
// does not take), after which it closes. The dialer then sends TCPReady,
// its RTU, and from the next byte on both ends carry the stream's work
// requests as internal/tcpqp frames.

// TCPMagic opens a resume request over TCP: no protocol a dual listener's
// clients speak starts with it, so the listener can tell a resume from a
// new connection by its first bytes.
var TCPMagic = [8]byte{'R', 'N', 'E', 'T', 'R', 'S', 'M', 1}

// The status byte of a listener's answer over TCP; any other value is a
// reject reason.
const (
	TCPAccepted = 0
	// TCPReady is the dialer's last handshake byte, its RTU.
	TCPReady = 1
)

// EncodeTCPRequest frames the private data of a resume request
// (EncodeRequest's, of RequestPrivateData bytes) for a TCP connection.
func EncodeTCPRequest(privateData []byte) ([]byte, error) {
	if len(privateData) != RequestPrivateData {
		return nil, errors.New("resume: a TCP request of " + strconv.Itoa(len(privateData)) + " bytes of private data, not " + strconv.Itoa(RequestPrivateData))
	}
	b := make([]byte, 0, len(TCPMagic)+1+len(privateData))
	b = append(b, TCPMagic[:]...)
	b = append(b, byte(len(privateData)))
	return append(b, privateData...), nil
}

// IsTCPRequest reports whether prefix, the first bytes of a TCP connection
// (len(TCPMagic) of them), open a resume request.
func IsTCPRequest(prefix []byte) bool { return bytes.HasPrefix(prefix, TCPMagic[:]) }

// ReadTCPRequest reads a resume request from a TCP connection and returns
// its private data, for ParseRequest. The peer is not trusted: the length
// must be RequestPrivateData.
func ReadTCPRequest(r io.Reader) ([]byte, error) {
	var h [len(TCPMagic) + 1]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	if !IsTCPRequest(h[:]) {
		return nil, protoErr(ErrMalformed, "a TCP connection that does not open with a resume request")
	}
	if n := int(h[len(TCPMagic)]); n != RequestPrivateData {
		return nil, protoErr(ErrMalformed, "a TCP resume request of "+strconv.Itoa(n)+" bytes, not "+strconv.Itoa(RequestPrivateData))
	}
	pd := make([]byte, RequestPrivateData)
	if _, err := io.ReadFull(r, pd); err != nil {
		return nil, err
	}
	return pd, nil
}

// EncodeTCPReply frames a listener's answer: TCPAccepted and the reply's
// private data (EncodeReply's), or a reject reason and none.
func EncodeTCPReply(status byte, privateData []byte) ([]byte, error) {
	if status != TCPAccepted {
		return []byte{status}, nil
	}
	if len(privateData) < ring.ConnDataSize+ReplyHeaderSize || len(privateData) > MaxReplyPrivateData {
		return nil, errors.New("resume: a TCP reply of " + strconv.Itoa(len(privateData)) + " bytes of private data")
	}
	return append([]byte{TCPAccepted, byte(len(privateData))}, privateData...), nil
}

// ReadTCPReply reads a listener's answer: its status, and for TCPAccepted
// the reply's private data, for ParseReply. The listener is not trusted:
// the length must fit a reply.
func ReadTCPReply(r io.Reader) (status byte, privateData []byte, err error) {
	var h [1]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	if h[0] != TCPAccepted {
		return h[0], nil, nil
	}
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[0])
	if n < ring.ConnDataSize+ReplyHeaderSize || n > MaxReplyPrivateData {
		return 0, nil, protoErr(ErrMalformed, "a TCP resume reply of "+strconv.Itoa(n)+" bytes")
	}
	privateData = make([]byte, n)
	if _, err := io.ReadFull(r, privateData); err != nil {
		return 0, nil, err
	}
	return TCPAccepted, privateData, nil
}
