package terraform

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// StateRecord identifies one version of a Terraform state and what it
// holds: what an apply records, and what an audit compares the stored
// state with.
type StateRecord struct {
	// Lineage and Serial are the state's own: the lineage is made when a
	// state is created, the serial rises on every write that changes it.
	Lineage string `json:"lineage"`
	Serial  uint64 `json:"serial"`
	// ResourcesDigest is StateResourcesDigest of the state.
	ResourcesDigest string `json:"resourcesDigest"`
	// Resources counts the managed resource instances.
	Resources int `json:"resources"`
}

// stateFile is the part of a state file (format version 4, as
// `terraform state pull` prints it and the backends store it) a
// StateRecord reads.
type stateFile struct {
	Version   *int    `json:"version"`
	Lineage   string  `json:"lineage"`
	Serial    *uint64 `json:"serial"`
	Resources []struct {
		Module    string `json:"module"`
		Mode      string `json:"mode"`
		Type      string `json:"type"`
		Name      string `json:"name"`
		Instances []struct {
			IndexKey   any             `json:"index_key"`
			Deposed    string          `json:"deposed"`
			Attributes json.RawMessage `json:"attributes"`
			// AttributesFlat is the state format of Terraform before
			// 0.12 upgraded a resource.
			AttributesFlat map[string]string `json:"attributes_flat"`
		} `json:"instances"`
	} `json:"resources"`
}

// ReadStateRecord reads a state file (JSON, state format version 4) and
// returns its lineage, serial and resources digest. It needs nothing but
// the file: no terraform, no provider schema, so an audit can recompute it
// from the stored state alone.
func ReadStateRecord(state []byte) (StateRecord, error) {
	var f stateFile
	dec := json.NewDecoder(bytes.NewReader(state))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return StateRecord{}, fmt.Errorf("terraform state: %w", err)
	}
	switch {
	case f.Version == nil:
		return StateRecord{}, errors.New("terraform state: no format version")
	case *f.Version != 4:
		return StateRecord{}, fmt.Errorf("terraform state: format version %d, only 4 is read", *f.Version)
	case f.Lineage == "" || f.Serial == nil:
		return StateRecord{}, errors.New("terraform state: no lineage or serial")
	}
	digest, n, err := resourcesDigest(&f)
	if err != nil {
		return StateRecord{}, err
	}
	return StateRecord{Lineage: f.Lineage, Serial: *f.Serial, ResourcesDigest: digest, Resources: n}, nil
}

// StateResourcesDigest is the sha256 ("sha256:<hex>") of a state's managed
// resource instances: for each, sorted by address, its address (a deposed
// object's with " deposed <key>") and its attributes as the state stores
// them, in canonical JSON (object keys sorted, numbers as written). Data
// sources are left out: terraform reads them anew on every run. The
// lineage and serial are left out too: two states holding the same
// resources have the same digest, whatever their history.
func StateResourcesDigest(state []byte) (string, error) {
	r, err := ReadStateRecord(state)
	return r.ResourcesDigest, err
}

// stateInstance is one entry of the resources digest.
type stateInstance struct {
	Address    string `json:"address"`
	Attributes any    `json:"attributes"`
}

func resourcesDigest(f *stateFile) (string, int, error) {
	var all []stateInstance
	for _, r := range f.Resources {
		if r.Mode != "managed" {
			continue
		}
		base := r.Type + "." + r.Name
		if r.Module != "" {
			base = r.Module + "." + base
		}
		for _, in := range r.Instances {
			addr := base + indexSuffix(in.IndexKey)
			if in.Deposed != "" {
				addr += " deposed " + in.Deposed
			}
			var attrs any
			switch {
			case len(in.Attributes) > 0:
				dec := json.NewDecoder(bytes.NewReader(in.Attributes))
				dec.UseNumber()
				if err := dec.Decode(&attrs); err != nil {
					return "", 0, fmt.Errorf("terraform state: %s: %w", addr, err)
				}
			case in.AttributesFlat != nil:
				attrs = in.AttributesFlat
			}
			all = append(all, stateInstance{Address: addr, Attributes: attrs})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Address < all[j].Address })
	for i := 1; i < len(all); i++ {
		if all[i].Address == all[i-1].Address {
			return "", 0, fmt.Errorf("terraform state: %s is there twice", all[i].Address)
		}
	}
	h := sha256.New()
	enc := json.NewEncoder(h)
	enc.SetEscapeHTML(false)
	for i := range all {
		if err := enc.Encode(&all[i]); err != nil {
			return "", 0, fmt.Errorf("terraform state: %s: %w", all[i].Address, err)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), len(all), nil
}

// indexSuffix is an instance's index as an address writes it: [0] or
// ["key"]; "" for none.
func indexSuffix(k any) string {
	switch v := k.(type) {
	case nil:
		return ""
	case json.Number:
		return "[" + v.String() + "]"
	case string:
		return "[" + strconv.Quote(v) + "]"
	default:
		b, _ := json.Marshal(v)
		return "[" + strings.TrimSpace(string(b)) + "]"
	}
}
