package gittest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHServer is an in-process SSH git server: it accepts only the authorised
// public key and runs git-upload-pack for "<name>.git" under Root.
type SSHServer struct {
	Root string
	Addr string
	// HostKey is the server's public host key.
	HostKey ssh.PublicKey
	// ClientKeyPEM is the private key the server accepts.
	ClientKeyPEM []byte

	ln         net.Listener
	cfg        *ssh.ServerConfig
	wg         sync.WaitGroup
	uploadPack atomic.Int64
}

// NewKeyPEM generates an ed25519 private key in OpenSSH PEM form.
func NewKeyPEM(t TB) ([]byte, ssh.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatalf("signer: %v", err)
	}
	return pem.EncodeToMemory(block), signer
}

// StartSSH serves root over SSH on a loopback port.
func StartSSH(t TB, root string) *SSHServer {
	t.Helper()
	_, hostSigner := NewKeyPEM(t)
	clientPEM, clientSigner := NewKeyPEM(t)
	allowed := clientSigner.PublicKey().Marshal()
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(key.Marshal(), allowed) {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("unknown public key")
		},
	}
	cfg.AddHostKey(hostSigner)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := &SSHServer{Root: root, Addr: ln.Addr().String(), HostKey: hostSigner.PublicKey(), ClientKeyPEM: clientPEM, ln: ln, cfg: cfg}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

// RepoURL is the ssh:// URL of <name>.git.
func (s *SSHServer) RepoURL(name string) string { return "ssh://git@" + s.Addr + "/" + name + ".git" }

// KnownHosts is a known_hosts line for this server.
func (s *SSHServer) KnownHosts() []byte {
	return []byte(knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, s.HostKey) + "\n")
}

// UploadPacks counts git-upload-pack runs (ls-remote and fetch alike).
func (s *SSHServer) UploadPacks() int64 { return s.uploadPack.Load() }

func (s *SSHServer) serve() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(conn)
		}()
	}
}

func (s *SSHServer) handle(nc net.Conn) {
	defer nc.Close()
	conn, chans, reqs, err := ssh.NewServerConn(nc, s.cfg)
	if err != nil {
		return
	}
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nch := range chans {
		if nch.ChannelType() != "session" {
			_ = nch.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, chReqs, err := nch.Accept()
		if err != nil {
			return
		}
		go s.session(ch, chReqs)
	}
}

func (s *SSHServer) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
			_ = req.Reply(false, nil)
			return
		}
		dir, err := s.repoDir(payload.Command)
		if err != nil {
			_ = req.Reply(false, nil)
			fmt.Fprintln(ch.Stderr(), err)
			return
		}
		_ = req.Reply(true, nil)
		s.uploadPack.Add(1)
		cmd := exec.Command("git-upload-pack", dir)
		cmd.Stdin = ch
		cmd.Stdout = ch
		cmd.Stderr = ch.Stderr()
		status := uint32(0)
		if err := cmd.Run(); err != nil {
			status = 1
		}
		_ = ch.CloseWrite()
		b := make([]byte, 4)
		binary.BigEndian.PutUint32(b, status)
		_, _ = ch.SendRequest("exit-status", false, b)
		return
	}
}

// repoDir maps "git-upload-pack '/name.git'" to a folder under Root.
func (s *SSHServer) repoDir(command string) (string, error) {
	prog, arg, ok := strings.Cut(command, " ")
	if !ok || prog != "git-upload-pack" {
		return "", fmt.Errorf("only git-upload-pack is served, not %q", prog)
	}
	arg = strings.Trim(arg, "'\"")
	clean := path.Clean("/" + arg)
	if !strings.HasSuffix(clean, ".git") || strings.Count(clean, "/") != 1 {
		return "", fmt.Errorf("no repository %q", arg)
	}
	return filepath.Join(s.Root, clean[1:]), nil
}

var _ io.Reader = (ssh.Channel)(nil)
