package simqp

import (
	"fmt"
	"net"

	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/simfabric"
)

// End is one end of a Pair: its queue pair and its established engine,
// ready for stream.Start.
type End struct {
	QP     *QP
	Engine *ring.Engine
}

// Pair connects two ends over a fresh simulated fabric, both configured by
// cfg (normalised), the first at address client, the second at server.
func Pair(cfg ring.Config, client, server net.Addr) (a, b End, err error) {
	return PairConfigs(cfg, cfg, client, server)
}

// PairConfigs is Pair with each end configured by a Config of its own, as
// a dialer's and a listener's can be.
func PairConfigs(clientCfg, serverCfg ring.Config, client, server net.Addr) (a, b End, err error) {
	return pair(clientCfg, serverCfg, client, server, nil)
}

// ResumedPair connects two fresh ends over a fresh simulated fabric, as a
// resume's new queue pair (see ring.Engine.BeginResume): each engine
// configured by its side's cfg (normalised) and given its side's exchange
// before Establish. The engines are ready for the Conn that resumes, not
// for stream.Start.
func ResumedPair(clientCfg, serverCfg ring.Config, clientOwn, serverOwn [ring.ExchangeSize]byte, client, server net.Addr) (a, b End, err error) {
	return pair(clientCfg, serverCfg, client, server, func(client, server *ring.Engine) error {
		if err := client.BeginResume(clientOwn); err != nil {
			return fmt.Errorf("simulated fabric: client resume: %w", err)
		}
		if err := server.BeginResume(serverOwn); err != nil {
			return fmt.Errorf("simulated fabric: server resume: %w", err)
		}
		return nil
	})
}

// pair is PairConfigs, calling begin, if not nil, before Establish.
func pair(clientCfg, serverCfg ring.Config, client, server net.Addr, begin func(client, server *ring.Engine) error) (a, b End, err error) {
	caps := func(cfg ring.Config) simfabric.Caps {
		layout := cfg.Layout()
		return simfabric.Caps{SendDepth: layout.SendDepth, RecvDepth: layout.RecvDepth, MaxInline: 256}
	}
	f := simfabric.New(1, simfabric.Options{Auto: true, DirectLanding: true})
	epa, epb := f.Pair(caps(clientCfg), caps(serverCfg))
	if a.Engine, err = NewEngine(clientCfg, epa); err != nil {
		return End{}, End{}, fmt.Errorf("simulated fabric: client engine: %w", err)
	}
	if b.Engine, err = NewEngine(serverCfg, epb); err != nil {
		return End{}, End{}, fmt.Errorf("simulated fabric: server engine: %w", err)
	}
	if begin != nil {
		if err := begin(a.Engine, b.Engine); err != nil {
			return End{}, End{}, err
		}
	}
	if err := Establish(a.Engine, b.Engine); err != nil {
		return End{}, End{}, err
	}
	a.QP = New(epa, client, server)
	b.QP = New(epb, server, client)
	Connect(a.QP, b.QP)
	return a, b, nil
}

// NewEngine makes an engine configured by cfg (normalised) over ep, with
// its rings registered there and its first receives posted.
func NewEngine(cfg ring.Config, ep *simfabric.Endpoint) (*ring.Engine, error) {
	layout := cfg.Layout()
	eng, err := ring.New(cfg,
		ep.Register(make([]byte, layout.SendRegion), false),
		ep.Register(make([]byte, layout.RecvRegion), true),
		ep.Register(make([]byte, layout.TargetRegion), true))
	if err != nil {
		return nil, err
	}
	return eng, ep.PostRecv(eng.PostRecvs(nil))
}

// Establish completes the handshake of two engines with each other's
// private data, as the connection manager's exchange would.
func Establish(a, b *ring.Engine) error {
	pa, pb := a.LocalConnData(), b.LocalConnData()
	if err := a.Establish(pb[:]); err != nil {
		return fmt.Errorf("simulated fabric: client handshake: %w", err)
	}
	if err := b.Establish(pa[:]); err != nil {
		return fmt.Errorf("simulated fabric: server handshake: %w", err)
	}
	return nil
}
