//go:build linux && cgo

package rnet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rnet-dev/rnet/internal/procstat"
	"github.com/rnet-dev/rnet/internal/rdmatest"
	"github.com/rnet-dev/rnet/internal/testcert"
)

// TestRXETLS: crypto/tls runs over a *Conn unchanged: the handshake, a
// read deadline that expires and a read after it, several MiB each way at
// once with matching checksums, and close_notify from each side in turn,
// which the other reads as io.EOF while its own direction goes on. Every
// connection is released after.
func TestRXETLS(t *testing.T) {
	pair := rdmatest.Require(t)
	warmUp(t, pair)
	gor0, fds0, res0 := procstat.GoroutineIDs(), countFDs(t), procstat.Resources(t)
	serverCfg, clientCfg := testcert.New(t, pair.Server.String())
	clientCfg.ServerName = pair.Server.String()
	c, s := connectConfigs(t, pair, nil, nil)
	tc, ts := tls.Client(c, clientCfg), tls.Server(s, serverCfg)
	defer tc.Close()
	defer ts.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	handshook := make(chan error, 1)
	go func() { handshook <- ts.HandshakeContext(ctx) }()
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-handshook; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	st := tc.ConnectionState()
	if st.Version != tls.VersionTLS13 || len(st.PeerCertificates) != 1 {
		t.Fatalf("connection state: version %x, %d peer certificates", st.Version, len(st.PeerCertificates))
	}

	// A read deadline that passes with nothing to read times out, and the
	// TLS stream goes on after it.
	tc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := tc.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	tc.SetReadDeadline(time.Time{})
	if _, err := ts.Write([]byte("after the deadline")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("after the deadline"))
	if _, err := io.ReadFull(tc, buf); err != nil || string(buf) != "after the deadline" {
		t.Fatalf("read after the deadline: %q, %v", buf, err)
	}

	// Both directions at once, each end checking the other's bytes.
	const size = 6 << 20
	send := func(conn *tls.Conn, seed uint64) <-chan error {
		done := make(chan error, 1)
		go func() {
			b := make([]byte, size)
			rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
			_, err := conn.Write(b)
			done <- err
		}()
		return done
	}
	want := func(seed uint64) [32]byte {
		b := make([]byte, size)
		rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
		return sha256.Sum256(b)
	}
	recv := func(conn *tls.Conn) ([32]byte, error) {
		h := sha256.New()
		_, err := io.CopyN(h, conn, size)
		var sum [32]byte
		h.Sum(sum[:0])
		return sum, err
	}
	toServer, toClient := send(tc, 1), send(ts, 2)
	serverGot := make(chan [32]byte, 1)
	go func() {
		sum, err := recv(ts)
		if err != nil {
			t.Errorf("server reading: %v", err)
		}
		serverGot <- sum
	}()
	clientSum, err := recv(tc)
	if err != nil {
		t.Fatalf("client reading: %v", err)
	}
	if err := <-toServer; err != nil {
		t.Fatalf("client writing: %v", err)
	}
	if err := <-toClient; err != nil {
		t.Fatalf("server writing: %v", err)
	}
	if clientSum != want(2) || <-serverGot != want(1) {
		t.Fatal("the bytes read differ from the bytes written")
	}

	// close_notify: the client's CloseWrite ends the server's reading with
	// io.EOF; the server still answers, then closes its side too.
	if err := tc.CloseWrite(); err != nil {
		t.Fatalf("client CloseWrite: %v", err)
	}
	if b, err := io.ReadAll(ts); err != nil || len(b) != 0 {
		t.Fatalf("server read after close_notify: %d bytes, %v; want io.EOF", len(b), err)
	}
	if _, err := ts.Write([]byte("last words")); err != nil {
		t.Fatalf("server write after the client's close_notify: %v", err)
	}
	if err := ts.CloseWrite(); err != nil {
		t.Fatalf("server CloseWrite: %v", err)
	}
	if b, err := io.ReadAll(tc); err != nil || !bytes.Equal(b, []byte("last words")) {
		t.Fatalf("client read: %q, %v; want the last words, then io.EOF", b, err)
	}
	if err := tc.Close(); err != nil {
		t.Errorf("client Close: %v", err)
	}
	if err := ts.Close(); err != nil {
		t.Errorf("server Close: %v", err)
	}
	checkReleased(t, gor0, fds0, res0)
}
