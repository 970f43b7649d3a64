package tcpfab

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Fabric authentication (Config.Secret, Server.RequireSecret).
//
// Anyone who can reach a memory node's port could otherwise read and write
// the lock table, and anyone who can reach a proxy's peer port could hand
// it locks. With a shared secret, every connection to either port starts
// with a challenge, before any frame:
//
//	acceptor -> dialer:  "SLAUTH1\x00" Ns              (Ns: 32 random bytes)
//	dialer -> acceptor:  "SLAUTH1\x00" Nc MAC("dialer", Ns, Nc)
//	acceptor -> dialer:  MAC("acceptor", Ns, Nc)
//
// MAC is HMAC-SHA256 keyed with the secret. Each side proves it knows the
// secret without sending it, fresh nonces defeat replays, and the labels
// keep one side's proof from being reflected as the other's. An acceptor
// closes a connection that fails the challenge, or sends anything else
// first, with a logged reason, before reading a single frame.
//
// What it does not do: the frames that follow are neither encrypted nor
// integrity-protected, so someone who can rewrite packets between two
// authenticated nodes can still tamper with them (docs/reliability.md,
// "Security model").
const (
	authPreamble = "SLAUTH1\x00"
	authNonce    = 32
	authMACSize  = sha256.Size
	// authTimeout bounds the challenge: a silent dialer cannot hold an
	// acceptor's goroutine for longer.
	authTimeout = 5 * time.Second
)

// errAuth is the cause of every failed challenge.
var errAuth = errors.New("tcpfab: fabric authentication failed")

func authMAC(secret []byte, label string, ns, nc []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(ns)
	m.Write(nc)
	return m.Sum(nil)
}

// acceptAuth runs the acceptor's side of the challenge on a new connection.
func acceptAuth(c net.Conn, secret []byte) error {
	_ = c.SetDeadline(time.Now().Add(authTimeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	ns := make([]byte, authNonce)
	if _, err := rand.Read(ns); err != nil {
		return err
	}
	if _, err := c.Write(append([]byte(authPreamble), ns...)); err != nil {
		return fmt.Errorf("%w: sending the challenge: %v", errAuth, err)
	}
	pre := make([]byte, len(authPreamble))
	if _, err := io.ReadFull(c, pre); err != nil {
		return fmt.Errorf("%w: no answer to the challenge: %v", errAuth, err)
	}
	if string(pre) != authPreamble {
		return fmt.Errorf("%w: the peer sent %q instead of answering the challenge (it has no fabric secret configured, or is not a shiftlock node)", errAuth, pre)
	}
	in := make([]byte, authNonce+authMACSize)
	if _, err := io.ReadFull(c, in); err != nil {
		return fmt.Errorf("%w: short answer to the challenge: %v", errAuth, err)
	}
	nc, mac := in[:authNonce], in[authNonce:]
	if !hmac.Equal(mac, authMAC(secret, "dialer", ns, nc)) {
		return fmt.Errorf("%w: wrong secret", errAuth)
	}
	if _, err := c.Write(authMAC(secret, "acceptor", ns, nc)); err != nil {
		return fmt.Errorf("%w: sending the proof: %v", errAuth, err)
	}
	return nil
}

// dialAuth runs the dialer's side of the challenge on a new connection.
func dialAuth(c net.Conn, secret []byte) error {
	_ = c.SetDeadline(time.Now().Add(authTimeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	in := make([]byte, len(authPreamble)+authNonce)
	if _, err := io.ReadFull(c, in); err != nil {
		return fmt.Errorf("%w: no challenge from the far end (does it have a fabric secret configured?): %v", errAuth, err)
	}
	if string(in[:len(authPreamble)]) != authPreamble {
		return fmt.Errorf("%w: the far end did not send a challenge", errAuth)
	}
	ns := in[len(authPreamble):]
	nc := make([]byte, authNonce)
	if _, err := rand.Read(nc); err != nil {
		return err
	}
	out := append([]byte(authPreamble), nc...)
	out = append(out, authMAC(secret, "dialer", ns, nc)...)
	if _, err := c.Write(out); err != nil {
		return fmt.Errorf("%w: answering the challenge: %v", errAuth, err)
	}
	proof := make([]byte, authMACSize)
	if _, err := io.ReadFull(c, proof); err != nil {
		return fmt.Errorf("%w: the far end refused our secret: %v", errAuth, err)
	}
	if !hmac.Equal(proof, authMAC(secret, "acceptor", ns, nc)) {
		return fmt.Errorf("%w: the far end does not know the secret", errAuth)
	}
	return nil
}
