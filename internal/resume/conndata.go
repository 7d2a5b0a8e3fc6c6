package resume

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
	"time"

	"github.com/rnet-dev/rnet/internal/ring"
)

// The bits of rs_conn_data's flags (offset 1) that the extension uses. C
// rsocket reads only bits 0 and 1 and echoes neither of these nor any byte
// after the struct, so a reply without ConnDataFlag is a C peer (or a
// listener that keeps no resume state for this connection).
const (
	// ConnDataFlag says the sender speaks the extension: in a request, that
	// 16 bytes of extension follow the 40-byte struct; in a reply, that the
	// listener agreed and its extension follows.
	ConnDataFlag = 1 << 5
	// ResumeFlag, in a request with ConnDataFlag, says the request resumes
	// a connection and its extension is the token; without it the request
	// is a new connection that offers the extension. In a reply with
	// ConnDataFlag it says the listener also takes resumes over TCP on
	// the port dialled (TCPFlag).
	ResumeFlag = 1 << 4
	// TCPFlag is ResumeFlag in a reply: the listener is a dual listener
	// that takes resumes over TCP (see tcp.go). A dialer of version 1 from
	// before it ignored the bit there.
	TCPFlag = ResumeFlag
)

// Version is the extension version this package speaks.
const Version = 1

// The request's extension: 16 bytes right after rs_conn_data, which is all
// an IB CM REQ has left once the connection manager's 36-byte header for IP
// addressing is in (92 - 36 - 40).
const (
	RequestSize        = 16
	RequestPrivateData = ring.ConnDataSize + RequestSize // 56
)

// The reply's extension after rs_conn_data: a 20-byte header (version,
// address count, lifetime in seconds, token) and up to MaxAddrs addresses
// of AddrSize bytes each, within the 196 bytes of an IB CM REP.
const (
	ReplyHeaderSize = 20
	AddrSize        = 18 // a 16-byte IPv6 address (IPv4 mapped) and a big-endian port
	MaxAddrs        = 7
	// MaxReplyPrivateData is the largest reply this package writes.
	MaxReplyPrivateData = ring.ConnDataSize + ReplyHeaderSize + MaxAddrs*AddrSize // 186
	// MaxLifetime is the longest lifetime a reply can state.
	MaxLifetime = 65535 * time.Second
)

// RequestKind says what a connection request asks of the listener.
type RequestKind uint8

const (
	// Plain is a request without the extension: a C rsocket dialer, or an
	// rnet dialer that does not offer it.
	Plain RequestKind = iota
	// Offer is a new connection whose dialer offers the extension.
	Offer
	// Resume asks to continue the connection the token names.
	Resume
)

// Request is the extension in a connection request.
type Request struct {
	Kind RequestKind
	// Version is, in an Offer, the highest extension version the dialer
	// speaks (at least 1).
	Version uint8
	// Token is, in a Resume, the token presented.
	Token Token
}

// EncodeRequest returns connData (the 40 bytes of ring.Engine.LocalConnData)
// with the extension's flags set for r's kind and r's 16 bytes after it, in
// a new slice. A Plain request returns a copy of connData with both flags
// clear. Its errors are the caller's mistakes, not a peer's.
func EncodeRequest(connData []byte, r Request) ([]byte, error) {
	if len(connData) != ring.ConnDataSize {
		return nil, errConnDataSize(len(connData))
	}
	b := make([]byte, RequestPrivateData)
	copy(b, connData)
	b[1] &^= ConnDataFlag | ResumeFlag
	switch r.Kind {
	case Plain:
		return b[:ring.ConnDataSize], nil
	case Offer:
		if r.Version == 0 {
			return nil, errors.New("resume: an offer of version 0")
		}
		b[ring.ConnDataSize] = r.Version
	case Resume:
		copy(b[ring.ConnDataSize:], r.Token[:])
		b[1] |= ResumeFlag
	default:
		return nil, errors.New("resume: request kind " + strconv.Itoa(int(r.Kind)))
	}
	b[1] |= ConnDataFlag
	return b, nil
}

// ParseRequest reads the extension from a connection request's private data
// (from rs_conn_data on: an AF_IB header stripped). Without ConnDataFlag it
// is a Plain request, whatever follows the struct. With it, the 16 bytes
// after the struct are the token if ResumeFlag is set too, else an offer:
// the version, then 15 reserved bytes that a later version may define and
// this one ignores. Anything after the 16 bytes must be zero, as the
// connection manager pads. ResumeFlag means nothing without ConnDataFlag.
func ParseRequest(privateData []byte) (Request, error) {
	if len(privateData) < ring.ConnDataSize {
		return Request{}, protoErr(ErrShort, "request private data of "+strconv.Itoa(len(privateData))+" bytes")
	}
	flags := privateData[1]
	if flags&ConnDataFlag == 0 {
		return Request{Kind: Plain}, nil
	}
	if len(privateData) < RequestPrivateData {
		return Request{}, protoErr(ErrShort, "request private data of "+strconv.Itoa(len(privateData))+
			" bytes with the extension's flag; it needs "+strconv.Itoa(RequestPrivateData))
	}
	if err := checkZeroTail(privateData, RequestPrivateData, "request"); err != nil {
		return Request{}, err
	}
	ext := privateData[ring.ConnDataSize:RequestPrivateData]
	if flags&ResumeFlag != 0 {
		return Request{Kind: Resume, Token: Token(ext)}, nil
	}
	if ext[0] == 0 {
		return Request{}, protoErr(ErrVersion, "offer of version 0")
	}
	return Request{Kind: Offer, Version: ext[0]}, nil
}

// Reply is the extension in a listener's reply to an Offer or a Resume.
type Reply struct {
	// Version is the extension version the connection speaks: the lower of
	// the dialer's offer and the listener's own.
	Version uint8
	// Lifetime is how long the listener keeps the connection once its
	// path has failed, for a resume to come: whole seconds, from 1 s to
	// MaxLifetime (a fraction of a second is dropped when encoded).
	Lifetime time.Duration
	// Token is the token the dialer presents to resume: a new one after
	// every resume.
	Token Token
	// Addrs are the listener's other addresses, where it takes resumes
	// too, in its order of preference: at most MaxAddrs, each a unicast
	// address with a port, no zone (so no IPv6 link-local address).
	Addrs []netip.AddrPort
	// TCP says the listener also takes resumes over TCP on the port
	// dialled (TCPFlag), when no RDMA path is left.
	TCP bool
}

// EncodeReply returns connData (the 40 bytes of ring.Engine.LocalConnData)
// with ConnDataFlag set, TCPFlag as r.TCP says and r after it, in a new
// slice.
// Its errors are the caller's mistakes, not a peer's.
func EncodeReply(connData []byte, r Reply) ([]byte, error) {
	if len(connData) != ring.ConnDataSize {
		return nil, errConnDataSize(len(connData))
	}
	if r.Version != Version {
		return nil, errors.New("resume: reply of version " + strconv.Itoa(int(r.Version)))
	}
	if r.Lifetime < time.Second || r.Lifetime > MaxLifetime || r.Lifetime%time.Second != 0 {
		return nil, errors.New("resume: reply lifetime " + r.Lifetime.String() + " is not whole seconds from 1s to " + MaxLifetime.String())
	}
	if len(r.Addrs) > MaxAddrs {
		return nil, errors.New("resume: " + strconv.Itoa(len(r.Addrs)) + " addresses in a reply, more than " + strconv.Itoa(MaxAddrs))
	}
	b := make([]byte, ring.ConnDataSize+ReplyHeaderSize+len(r.Addrs)*AddrSize)
	copy(b, connData)
	b[1] &^= TCPFlag
	b[1] |= ConnDataFlag
	if r.TCP {
		b[1] |= TCPFlag
	}
	h := b[ring.ConnDataSize:]
	h[0] = r.Version
	h[1] = uint8(len(r.Addrs))
	binary.BigEndian.PutUint16(h[2:], uint16(r.Lifetime/time.Second))
	copy(h[4:ReplyHeaderSize], r.Token[:])
	for i, a := range r.Addrs {
		if bad := AddrProblem(a); bad != "" {
			return nil, errors.New("resume: reply address " + strconv.Itoa(i) + " " + a.String() + ": " + bad)
		}
		e := h[ReplyHeaderSize+i*AddrSize:]
		ip := a.Addr().As16()
		copy(e, ip[:])
		binary.BigEndian.PutUint16(e[16:], a.Port())
	}
	return b, nil
}

// ParseReply reads the extension from a reply's private data (from
// rs_conn_data on). ok is false when the reply lacks ConnDataFlag: the
// listener does not resume this connection (a C rsocket listener never
// sets it). A reply with the flag must hold a valid version 1 extension;
// anything after its last address must be zero, as the connection manager
// pads (to 196 bytes on InfiniBand and RoCE).
func ParseReply(privateData []byte) (r Reply, ok bool, err error) {
	if len(privateData) < ring.ConnDataSize {
		return Reply{}, false, protoErr(ErrShort, "reply private data of "+strconv.Itoa(len(privateData))+" bytes")
	}
	if privateData[1]&ConnDataFlag == 0 {
		return Reply{}, false, nil
	}
	h := privateData[ring.ConnDataSize:]
	if len(h) < ReplyHeaderSize {
		return Reply{}, false, protoErr(ErrShort, "reply private data of "+strconv.Itoa(len(privateData))+
			" bytes with the extension's flag; its header needs "+strconv.Itoa(ring.ConnDataSize+ReplyHeaderSize))
	}
	if h[0] != Version {
		return Reply{}, false, protoErr(ErrVersion, "reply of version "+strconv.Itoa(int(h[0]))+" to an offer of "+strconv.Itoa(Version))
	}
	n := int(h[1])
	if n > MaxAddrs {
		return Reply{}, false, protoErr(ErrMalformed, strconv.Itoa(n)+" addresses, more than "+strconv.Itoa(MaxAddrs))
	}
	r.Version = h[0]
	r.TCP = privateData[1]&TCPFlag != 0
	secs := binary.BigEndian.Uint16(h[2:])
	if secs == 0 {
		return Reply{}, false, protoErr(ErrMalformed, "lifetime 0")
	}
	r.Lifetime = time.Duration(secs) * time.Second
	copy(r.Token[:], h[4:ReplyHeaderSize])
	end := ring.ConnDataSize + ReplyHeaderSize + n*AddrSize
	if len(privateData) < end {
		return Reply{}, false, protoErr(ErrShort, "reply private data of "+strconv.Itoa(len(privateData))+
			" bytes for "+strconv.Itoa(n)+" addresses; they need "+strconv.Itoa(end))
	}
	if err := checkZeroTail(privateData, end, "reply"); err != nil {
		return Reply{}, false, err
	}
	if n > 0 {
		r.Addrs = make([]netip.AddrPort, n)
	}
	for i := range n {
		e := h[ReplyHeaderSize+i*AddrSize:]
		a := netip.AddrPortFrom(netip.AddrFrom16([16]byte(e[:16])).Unmap(), binary.BigEndian.Uint16(e[16:]))
		if bad := AddrProblem(a); bad != "" {
			return Reply{}, false, protoErr(ErrMalformed, "address "+strconv.Itoa(i)+" "+a.String()+": "+bad)
		}
		r.Addrs[i] = a
	}
	return r, true, nil
}

// AddrProblem says why a dialer could not use a as another address of the
// listener, or "" if it can: unspecified, multicast or broadcast, port 0,
// a zone the wire cannot carry, or an address that names the dialer's own
// host (loopback) or that no stack routes (IPv4-compatible ::a.b.c.d), where
// a dialer would send its token to whatever listens there. A listener names
// no such address in a reply, and ParseReply refuses a reply that does. A
// dialer uses a loopback address only as the one it dialled.
func AddrProblem(a netip.AddrPort) string {
	ip := a.Addr()
	switch {
	case !ip.IsValid():
		return "no address"
	case ip.Zone() != "":
		return "a zone"
	case ip.IsUnspecified(), ip.IsMulticast(), ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "not a unicast address"
	case ip.IsLoopback():
		return "a loopback address, the dialer's own host"
	case ip.Is4In6():
		return "an IPv4-mapped IPv6 address (give the IPv4 address)"
	case ip.Is6() && isIPv4Compatible(ip):
		return "an IPv4-compatible IPv6 address (::a.b.c.d), which no stack routes"
	case ip.Is6() && ip.IsLinkLocalUnicast():
		return "an IPv6 link-local address, which needs a zone"
	case a.Port() == 0:
		return "port 0"
	}
	return ""
}

// isIPv4Compatible reports whether ip is in ::/96, the deprecated
// IPv4-compatible form (RFC 4291, 2.5.5.1).
func isIPv4Compatible(ip netip.Addr) bool {
	b := ip.As16()
	return [12]byte(b[:12]) == [12]byte{}
}

// checkZeroTail refuses private data with anything but zeros from end on.
func checkZeroTail(b []byte, end int, what string) error {
	for i := end; i < len(b); i++ {
		if b[i] != 0 {
			return protoErr(ErrMalformed, what+" byte "+strconv.Itoa(i)+" after the extension is "+strconv.Itoa(int(b[i]))+", not 0")
		}
	}
	return nil
}

func errConnDataSize(n int) error {
	return errors.New("resume: conn data of " + strconv.Itoa(n) + " bytes, not " + strconv.Itoa(ring.ConnDataSize))
}
