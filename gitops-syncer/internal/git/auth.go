package git

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
)

// Keys of the credentials Secret a Repository references.
const (
	// SecretKeyUsername is the HTTPS user name (or the SSH user).
	SecretKeyUsername = "username"
	// SecretKeyPassword is the HTTPS password or token.
	SecretKeyPassword = "password"
	// SecretKeyBearerToken is an HTTPS bearer token.
	SecretKeyBearerToken = "bearerToken"
	// SecretKeyIdentity is a PEM-encoded SSH private key.
	SecretKeyIdentity = "identity"
	// SecretKeyIdentityPassphrase decrypts an encrypted identity.
	SecretKeyIdentityPassphrase = "identityPassphrase"
	// SecretKeyKnownHosts holds known_hosts lines for SSH remotes.
	SecretKeyKnownHosts = "known_hosts"
	// SecretKeyInsecureIgnoreHostKey set to "true" turns off SSH host key
	// checking. Nothing else turns it off.
	SecretKeyInsecureIgnoreHostKey = "insecureIgnoreHostKey"
)

// Auth holds the credentials of one remote. Its String never prints them.
type Auth struct {
	Username    string
	Password    string
	BearerToken string
	// Identity is a PEM SSH private key, with an optional passphrase.
	Identity           []byte
	IdentityPassphrase string
	// KnownHosts are known_hosts lines checked against the SSH host key.
	KnownHosts []byte
	// InsecureIgnoreHostKey skips host key checking; only an explicit Secret
	// key sets it.
	InsecureIgnoreHostKey bool
}

// String hides every credential.
func (a *Auth) String() string { return "git.Auth{redacted}" }

// GoString hides every credential from %#v.
func (a *Auth) GoString() string { return a.String() }

// secrets lists the credential values, for scrubbing error messages.
func (a *Auth) secrets() []string {
	if a == nil {
		return nil
	}
	var out []string
	for _, s := range []string{a.Password, a.BearerToken, a.IdentityPassphrase} {
		if len(s) >= 3 {
			out = append(out, s)
		}
	}
	return out
}

// AuthFromSecret reads the credentials from a Secret's data. An empty map
// gives nil (anonymous access). Errors never contain the values.
func AuthFromSecret(data map[string][]byte) (*Auth, error) {
	if len(data) == 0 {
		return nil, nil
	}
	a := &Auth{
		Username:           string(data[SecretKeyUsername]),
		Password:           string(data[SecretKeyPassword]),
		BearerToken:        string(data[SecretKeyBearerToken]),
		Identity:           data[SecretKeyIdentity],
		IdentityPassphrase: string(data[SecretKeyIdentityPassphrase]),
		KnownHosts:         data[SecretKeyKnownHosts],
	}
	if v, ok := data[SecretKeyInsecureIgnoreHostKey]; ok {
		switch strings.TrimSpace(string(v)) {
		case "true":
			a.InsecureIgnoreHostKey = true
		case "false", "":
		default:
			return nil, fmt.Errorf("secret key %q must be \"true\" or \"false\"", SecretKeyInsecureIgnoreHostKey)
		}
	}
	if a.BearerToken != "" && a.Password != "" {
		return nil, errors.New("secret sets both password and bearerToken; keep one")
	}
	if len(a.Identity) > 0 {
		if _, err := parseIdentity(a.Identity, a.IdentityPassphrase); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func parseIdentity(pemBytes []byte, passphrase string) (ssh.Signer, error) {
	var (
		s   ssh.Signer
		err error
	)
	if passphrase != "" {
		s, err = ssh.ParsePrivateKeyWithPassphrase(pemBytes, []byte(passphrase))
	} else {
		s, err = ssh.ParsePrivateKey(pemBytes)
	}
	if err != nil {
		// The parse error can quote key material; say only what is wrong.
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, errors.New("secret key \"identity\" is encrypted and no identityPassphrase is set")
		}
		return nil, errors.New("secret key \"identity\" is not a valid SSH private key")
	}
	return s, nil
}

// authMethod builds the go-git auth for endpoint ep. knownHostsDir is where
// the known_hosts lines are written for the ssh library to read.
func (a *Auth) authMethod(ep *transport.Endpoint, knownHostsDir string) (transport.AuthMethod, error) {
	switch ep.Protocol {
	case "http", "https":
		if a == nil {
			return nil, nil
		}
		if a.BearerToken != "" {
			return &githttp.TokenAuth{Token: a.BearerToken}, nil
		}
		if a.Username != "" || a.Password != "" {
			user := a.Username
			if user == "" {
				user = "git" // a token alone: most hosts accept any user name.
			}
			return &githttp.BasicAuth{Username: user, Password: a.Password}, nil
		}
		return nil, nil
	case "ssh":
		user := ep.User
		if user == "" && a != nil {
			user = a.Username
		}
		if user == "" {
			user = "git"
		}
		if a == nil || len(a.Identity) == 0 {
			return nil, &Error{Reason: ReasonSecret, Message: "an SSH remote needs a Secret with an \"identity\" key"}
		}
		signer, err := parseIdentity(a.Identity, a.IdentityPassphrase)
		if err != nil {
			return nil, &Error{Reason: ReasonSecret, Message: err.Error()}
		}
		pk := &gitssh.PublicKeys{User: user, Signer: signer}
		if a.InsecureIgnoreHostKey {
			pk.HostKeyCallback = ssh.InsecureIgnoreHostKey() // #nosec: explicitly requested by the Secret
			return pk, nil
		}
		if len(a.KnownHosts) == 0 {
			return nil, &Error{Reason: ReasonSecret, Message: "an SSH remote needs a \"known_hosts\" key in its Secret (or insecureIgnoreHostKey: \"true\")"}
		}
		file, err := writeKnownHosts(knownHostsDir, a.KnownHosts)
		if err != nil {
			return nil, err
		}
		db, err := gitssh.NewKnownHostsDb(file)
		if err != nil {
			return nil, &Error{Reason: ReasonSecret, Message: "secret key \"known_hosts\" cannot be parsed"}
		}
		port := ep.Port
		if port == 0 {
			port = 22
		}
		pk.HostKeyCallback = db.HostKeyCallback()
		pk.HostKeyAlgorithms = db.HostKeyAlgorithms(net.JoinHostPort(ep.Host, fmt.Sprint(port)))
		return pk, nil
	}
	return nil, nil
}

// writeKnownHosts stores known_hosts content in a file named by its hash, so
// concurrent operations never see a half-written file.
func writeKnownHosts(dir string, content []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create known_hosts folder: %w", err)
	}
	name := filepath.Join(dir, "known_hosts-"+shortHash(string(content)))
	if _, err := os.Stat(name); err == nil {
		return name, nil
	}
	tmp, err := os.CreateTemp(dir, ".known_hosts-*")
	if err != nil {
		return "", fmt.Errorf("write known_hosts: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write known_hosts: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("write known_hosts: %w", err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return "", fmt.Errorf("write known_hosts: %w", err)
	}
	return name, nil
}
