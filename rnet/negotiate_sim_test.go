package rnet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
	"github.com/rnet-dev/rnet/internal/simqp"
)

// The padding the connection manager gives private data on RoCE with IP
// addressing: a listener is told 56 bytes of a request, a dialer 196 of a
// reply, zero-padded.
const (
	simRequestSeen = 56
	simReplySeen   = 196
)

var (
	simDialer   = netip.MustParseAddrPort("10.0.0.1:40000")
	simListener = netip.MustParseAddrPort("10.0.0.2:7471")
)

// simHandshake is one negotiated connection over the simulated fabric.
type simHandshake struct {
	dialer, listener *Conn
	request, reply   []byte // the private data each side sent
	// requestConnData and replyConnData are each engine's rs_conn_data
	// with its port MTU: all the private data was before the extension.
	requestConnData, replyConnData []byte
	grant                          *resumeGrant
	// attempt is a resume request's attempt that the listener's table
	// took (errSimResumeTaken): the handshake would run from here.
	attempt *resume.Attempt[*resumeEntry]
}

// errSimResumeTaken is simNegotiate's answer to a resume request whose
// token the listener's table took: its handshake is not simulated.
var errSimResumeTaken = errors.New("the listener took the resume request")

// simNegotiate connects a dialer configured by dset to a listener
// configured by lset with resume state lr (nil: the switch off), through
// the steps dial_linux.go and accept_linux.go take around the connection
// manager: the request's private data, the listener's screen before
// anything is set up, the grant, the engines, the reply and the dialer's
// reading of it. edit, if not nil, changes the request on the wire.
func simNegotiate(dset, lset settings, lr *resumeListener, edit func([]byte) []byte) (simHandshake, error) {
	var h simHandshake
	caps := func(cfg ring.Config) simfabric.Caps {
		l := cfg.Layout()
		return simfabric.Caps{SendDepth: l.SendDepth, RecvDepth: l.RecvDepth, MaxInline: 256}
	}
	f := simfabric.New(1, simfabric.Options{Auto: true, DirectLanding: true})
	epa, epb := f.Pair(caps(dialRingConfig(dset)), caps(lset.ring))
	deng, err := simqp.NewEngine(dialRingConfig(dset), epa)
	if err != nil {
		return h, err
	}
	pd := deng.LocalConnData()
	ring.SetPortMTU(&pd, 4096)
	h.requestConnData = bytes.Clone(pd[:])
	if h.request, err = requestData(pd[:], dset); err != nil {
		return h, err
	}
	seen := h.request
	if edit != nil {
		seen = edit(bytes.Clone(seen))
	}
	seen = append(bytes.Clone(seen), make([]byte, max(simRequestSeen-len(seen), 0))...)

	// The listener.
	sc, err := lr.screen(seen)
	if err != nil {
		return h, err
	}
	if sc.resume != nil {
		h.attempt = sc.resume
		return h, errSimResumeTaken
	}
	if _, err := ring.DecodeConnData(seen); err != nil { // admit's check
		return h, err
	}
	nego, err := lr.begin(sc.offer)
	if err != nil {
		return h, err
	}
	defer nego.end()
	h.grant = nego.grant
	leng, err := simqp.NewEngine(nego.ringConfig(lset.ring), epb)
	if err != nil {
		return h, err
	}
	if err := leng.Establish(seen); err != nil {
		return h, err
	}
	lpd := leng.LocalConnData()
	ring.SetPortMTU(&lpd, 4096)
	h.replyConnData = bytes.Clone(lpd[:])
	if h.reply, err = nego.reply(lpd[:], simListener.Addr(), "rxe0"); err != nil {
		return h, err
	}

	// The dialer.
	replySeen := append(bytes.Clone(h.reply), make([]byte, simReplySeen-len(h.reply))...)
	agreed, err := acceptReply(deng, replySeen, dset.resume)
	if err != nil {
		return h, err
	}
	qa, qb := simqp.New(epa, netAddr(simDialer), netAddr(simListener)), simqp.New(epb, netAddr(simListener), netAddr(simDialer))
	simqp.Connect(qa, qb)
	h.dialer = newNegotiatedConn(qa, deng, dset, agreed, nil)
	h.listener = nego.conn(qb, leng, lset)
	return h, nil
}

// resumeSettings is the default settings with the resume switch as on says.
func resumeSettings(on bool) settings {
	set := (*Config)(nil).settings()
	set.resume = on
	return set
}

// newTestResumeListener is a listener's resume state with room for
// entries connections, at a wildcard address on a host with a few
// addresses.
func newTestResumeListener(t *testing.T, entries int) *resumeListener {
	t.Helper()
	table, err := resume.NewTable[*resumeEntry](resume.TableConfig{MaxEntries: entries})
	if err != nil {
		t.Fatal(err)
	}
	local := []hostDevice{
		{"rxe0", []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fd00::2")}},
		{"rxe1", []netip.Addr{netip.MustParseAddr("10.1.0.2")}},
	}
	return &resumeListener{table: table, devices: resumeAddrs(netip.MustParseAddrPort("[::]:7471"), false, local)}
}

// roundTrip sends a message each way on a and b and checks it arrives.
func roundTrip(t *testing.T, a, b *Conn, size int) {
	t.Helper()
	for i, pair := range [][2]*Conn{{a, b}, {b, a}} {
		msg := bytes.Repeat([]byte{byte('a' + i)}, size)
		errc := make(chan error, 1)
		go func() {
			_, err := pair[0].Write(msg)
			errc <- err
		}()
		got := make([]byte, size)
		if _, err := io.ReadFull(pair[1], got); err != nil {
			t.Fatalf("direction %d: read: %v", i, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("direction %d: write: %v", i, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("direction %d: bytes differ", i)
		}
	}
}

func closeBoth(t *testing.T, h simHandshake) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- h.listener.Close() }()
	if err := h.dialer.Close(); err != nil {
		t.Errorf("dialer Close: %v", err)
	}
	if err := <-errc; err != nil {
		t.Errorf("listener Close: %v", err)
	}
}

// TestResumeNegotiated: a dialer and a listener that both have the switch
// on agree: the reply carries a token the listener's table knows, its
// lifetime and its other addresses; both engines keep sent bytes until
// the peer has them; the stream runs both ways.
func TestResumeNegotiated(t *testing.T) {
	lr := newTestResumeListener(t, 4)
	h, err := simNegotiate(resumeSettings(true), resumeSettings(true), lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBoth(t, h)
	if len(h.request) != resume.RequestPrivateData || h.request[1]&resume.ConnDataFlag == 0 || h.request[1]&resume.ResumeFlag != 0 {
		t.Fatalf("request % x: want %d bytes, bit 5 set, bit 4 clear", h.request, resume.RequestPrivateData)
	}
	if req, err := resume.ParseRequest(h.request); err != nil || req.Kind != resume.Offer || req.Version != resume.Version {
		t.Fatalf("request parses as %+v, %v; want an offer of version %d", req, err, resume.Version)
	}
	agreed := h.dialer.resume
	if agreed == nil {
		t.Fatal("the dialer kept no agreement")
	}
	if agreed.lifetime != resume.DefaultLifetime {
		t.Errorf("lifetime %v, want %v", agreed.lifetime, resume.DefaultLifetime)
	}
	wantAddrs := []netip.AddrPort{netip.MustParseAddrPort("10.1.0.2:7471"), netip.MustParseAddrPort("[fd00::2]:7471")}
	if fmt.Sprint(agreed.addrs) != fmt.Sprint(wantAddrs) {
		t.Errorf("addresses %v, want %v (not the one dialled, no loopback or link-local)", agreed.addrs, wantAddrs)
	}
	if h.listener.resume != nil {
		t.Error("the listening end holds a dialer's agreement")
	}
	for name, c := range map[string]*Conn{"dialer": h.dialer, "listener": h.listener} {
		cfg := c.conn.EngineConfig()
		if !cfg.RetainUntilReceived || cfg.SharedRecv {
			t.Errorf("%s engine: RetainUntilReceived %v, SharedRecv %v; want true, false", name, cfg.RetainUntilReceived, cfg.SharedRecv)
		}
	}
	if n := lr.table.Len(); n != 1 {
		t.Fatalf("table holds %d connections, want 1", n)
	}
	roundTrip(t, h.dialer, h.listener, 300<<10) // past the send ring: retention releases bytes
	// The token the dialer holds names the listener's connection.
	a, err := lr.table.Begin(agreed.token)
	if err != nil || a.Value != h.grant.entry {
		t.Fatalf("the table takes the dialer's token as %v, %v; want the connection's entry", a.Value, err)
	}
	lr.table.Abort(a)
}

// TestResumeDeclined: a dialer that offers the extension to a listener that
// does not take it (the switch off there: a C listener or an rnet one from
// before answers the same) gets an ordinary connection, and so does one
// whose listener's table is full.
func TestResumeDeclined(t *testing.T) {
	h, err := simNegotiate(resumeSettings(true), resumeSettings(false), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.dialer.resume != nil || h.reply[1]&resume.ConnDataFlag != 0 || len(h.reply) != ring.ConnDataSize {
		t.Errorf("listener without the switch: agreement %v, reply % x; want none, 40 bytes without bit 5", h.dialer.resume, h.reply)
	}
	if h.listener.conn.EngineConfig().RetainUntilReceived {
		t.Error("a listener without the switch retains sent bytes")
	}
	roundTrip(t, h.dialer, h.listener, 64<<10)
	closeBoth(t, h)

	lr := newTestResumeListener(t, 1)
	first, err := simNegotiate(resumeSettings(true), resumeSettings(true), lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBoth(t, first)
	second, err := simNegotiate(resumeSettings(true), resumeSettings(true), lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBoth(t, second)
	if first.dialer.resume == nil || second.dialer.resume != nil || second.reply[1]&resume.ConnDataFlag != 0 {
		t.Errorf("table of 1: agreements %v, %v; want the first connection's only", first.dialer.resume, second.dialer.resume)
	}
	if second.listener.conn.EngineConfig().RetainUntilReceived {
		t.Error("a connection that went without resume retains sent bytes at the listener")
	}
	roundTrip(t, second.dialer, second.listener, 64<<10)
}

// TestResumeDeclinedOnSharedQueue: a listener on a shared receive queue
// advertises a credit window that grows (bit 7), which a retaining dialer
// cannot count. A dialer that offered and is declined, by a listener with
// the switch off or one whose table is full, stops retaining before it
// takes the reply, and the connection runs both ways past its rings.
func TestResumeDeclinedOnSharedQueue(t *testing.T) {
	shared := resumeSettings(false)
	shared.ring.SharedRecv = true
	sharedOn := shared
	sharedOn.resume = true
	full := newTestResumeListener(t, 1)
	first, err := simNegotiate(resumeSettings(true), sharedOn, full, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBoth(t, first)
	if first.dialer.resume == nil || first.listener.conn.EngineConfig().SharedRecv {
		t.Fatalf("the agreed connection: agreement %v, listener SharedRecv %v; want one, false",
			first.dialer.resume, first.listener.conn.EngineConfig().SharedRecv)
	}
	for _, tc := range []struct {
		name string
		lset settings
		lr   *resumeListener
	}{
		{"switch off", shared, nil},
		{"table full", sharedOn, full},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := simNegotiate(resumeSettings(true), tc.lset, tc.lr, nil)
			if err != nil {
				t.Fatalf("an offering dialer cannot connect to a declining listener on a shared queue: %v", err)
			}
			defer closeBoth(t, h)
			if h.reply[1]&ring.FlagGrowingCredits == 0 || h.reply[1]&resume.ConnDataFlag != 0 {
				t.Fatalf("reply flags %#x: want a growing window (bit 7), no agreement (bit 5)", h.reply[1])
			}
			if h.dialer.resume != nil {
				t.Error("an agreement from a declining listener")
			}
			if h.dialer.conn.EngineConfig().RetainUntilReceived {
				t.Error("the declined dialer still retains sent bytes")
			}
			roundTrip(t, h.dialer, h.listener, 300<<10)
		})
	}
}

// TestResumeSwitchOffWireUnchanged is the golden test: with the switch off
// at both ends, the request and reply are rs_conn_data alone, the bytes the
// engine's LocalConnData and port MTU always gave, extension flags clear; a
// listener with the switch on answers a plain request so too.
func TestResumeSwitchOffWireUnchanged(t *testing.T) {
	for _, lr := range []*resumeListener{nil, newTestResumeListener(t, 4)} {
		h, err := simNegotiate(resumeSettings(false), resumeSettings(lr != nil), lr, nil)
		if err != nil {
			t.Fatal(err)
		}
		for name, pair := range map[string]struct {
			c              *Conn
			wire, connData []byte
		}{"request": {h.dialer, h.request, h.requestConnData}, "reply": {h.listener, h.reply, h.replyConnData}} {
			golden := []byte{ring.ConnDataVersion, ring.FlagIOMap | ring.FlagRecvHeadroom, ring.DefaultQueueSize >> 8, ring.DefaultQueueSize & 0xff, ring.PortMTUCode(4096), 0, 0, 0}
			if len(pair.wire) != ring.ConnDataSize || !bytes.Equal(pair.wire[:8], golden) || !bytes.Equal(pair.wire, pair.connData) {
				t.Errorf("listener switch %v: %s % x, want 40 bytes starting % x, the engine's conn data % x",
					lr != nil, name, pair.wire, golden, pair.connData)
			}
			if pair.c.conn.EngineConfig().RetainUntilReceived {
				t.Errorf("listener switch %v: the %s's engine retains", lr != nil, name)
			}
		}
		if h.dialer.resume != nil {
			t.Error("an agreement without an offer")
		}
		if lr != nil && lr.table.Len() != 0 {
			t.Errorf("a plain request took a table entry")
		}
		roundTrip(t, h.dialer, h.listener, 1000)
		closeBoth(t, h)
	}
}

// TestResumeConfig: Config.Resume turns the extension on at both ends,
// and Conn.Config reports it, with its timeout, only on a connection that
// agreed; the listener keeps a failed connection twice the timeout, at
// least 10 s.
func TestResumeConfig(t *testing.T) {
	on := (&Config{Resume: true, ResumeTimeout: 8 * time.Second}).settings()
	if !on.resume || on.resumeTimeout != 8*time.Second {
		t.Fatalf("Config{Resume: true, ResumeTimeout: 8s}: resume %v, timeout %v", on.resume, on.resumeTimeout)
	}
	if def := (&Config{Resume: true}).settings(); def.resumeTimeout != 5*time.Second {
		t.Errorf("default ResumeTimeout %v, want 5s", def.resumeTimeout)
	}
	if (*Config)(nil).settings().resume {
		t.Error("resume on by default")
	}
	lr, err := newResumeListener(on, netip.MustParseAddrPort("[::]:7471"), false, noMemlockLimit, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := lr.table.Lifetime(); got != 16*time.Second {
		t.Errorf("table lifetime %v, want 16s", got)
	}
	for timeout, want := range map[time.Duration]time.Duration{
		100 * time.Millisecond: 10 * time.Second, 5 * time.Second: 10 * time.Second,
		5300 * time.Millisecond: 11 * time.Second, time.Minute: 2 * time.Minute,
	} {
		if got := resumeLifetime(timeout); got != want {
			t.Errorf("resumeLifetime(%v) = %v, want %v", timeout, got, want)
		}
	}
	h, err := simNegotiate(on, on, lr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBoth(t, h)
	for name, c := range map[string]*Conn{"dialer": h.dialer, "listener": h.listener} {
		if cfg := c.Config(); !cfg.Resume || cfg.ResumeTimeout != 8*time.Second {
			t.Errorf("%s: Config() Resume %v, ResumeTimeout %v; want true, 8s", name, cfg.Resume, cfg.ResumeTimeout)
		}
	}
	declined, err := simNegotiate(on, (*Config)(nil).settings(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBoth(t, declined)
	for name, c := range map[string]*Conn{"dialer": declined.dialer, "listener": declined.listener} {
		if cfg := c.Config(); cfg.Resume || cfg.ResumeTimeout != 0 {
			t.Errorf("declined, %s: Config() Resume %v, ResumeTimeout %v; want false, 0", name, cfg.Resume, cfg.ResumeTimeout)
		}
	}
}

// TestResumeListenerPeeks: a dual listener's TCP side looks only at
// connections from addresses with connections in the table, at most their
// number and morePeeks at once per address, and patiently only while one
// of them waits for its dialer.
func TestResumeListenerPeeks(t *testing.T) {
	var r resumeListener
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.2")
	if ok, _ := r.beginPeek(a); ok {
		t.Fatal("a look at a connection from an address with none in the table")
	}
	r.addPeer(a)
	r.addPeer(netip.MustParseAddr("::ffff:10.0.0.1")) // the same address, mapped
	for i := range 2 + morePeeks {
		ok, patient := r.beginPeek(a)
		if !ok || patient {
			t.Fatalf("look %d: ok %t, patient %t; want a look, not patient", i, ok, patient)
		}
	}
	if ok, _ := r.beginPeek(a); ok {
		t.Fatalf("more than %d looks at once from one address", 2+morePeeks)
	}
	if ok, _ := r.beginPeek(b); ok {
		t.Fatal("a look at another address's connection")
	}
	r.endPeek(a)
	r.waitingFrom(a, 1)
	if ok, patient := r.beginPeek(a); !ok || !patient {
		t.Fatalf("while a connection waits for its dialer: ok %t, patient %t; want both", ok, patient)
	}
	r.waitingFrom(a, -1)
	r.dropPeer(a)
	r.dropPeer(a)
	for range 2 + morePeeks {
		r.endPeek(a)
	}
	if ok, _ := r.beginPeek(a); ok || len(r.peers.conns) != 0 || len(r.peers.peeking) != 0 || len(r.peers.waiting) != 0 {
		t.Fatalf("after every connection ended: look %t, peers %v, peeking %v, waiting %v", ok, r.peers.conns, r.peers.peeking, r.peers.waiting)
	}
}
