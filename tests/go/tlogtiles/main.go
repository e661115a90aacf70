// Command tlogtiles follows a C2SP tlog-tiles log with Go's own transparency-log code
// (golang.org/x/mod/sumdb/tlog and sumdb/note), as an independent client of ledgermem's tiles:
// it checks the checkpoint's signature, authenticates every tile it reads against the signed
// root, checks that every entry of the entry bundles hashes to its leaf, proves each record's
// inclusion, and, given an older checkpoint, proves the newer tree consistent with it.
//
// Usage: tlogtiles PREFIX_URL VKEY [OLD_CHECKPOINT_FILE]
// It prints one JSON object; any failure exits 1 with the reason on stderr.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const height = 8 // tlog-tiles fixes the tile height at 8

type tree struct {
	origin string
	size   int64
	root   tlog.Hash
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func get(url string) []byte {
	resp, err := http.Get(url)
	if err != nil {
		fail("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		fail("GET %s: %v", url, err)
	}
	if resp.StatusCode != 200 {
		fail("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return body
}

// openCheckpoint verifies a signed note with the log's vkey and parses its tree
// (origin, size, base64 root: the first three lines of c2sp.org/tlog-checkpoint).
func openCheckpoint(msg []byte, verifier note.Verifier) tree {
	n, err := note.Open(msg, note.VerifierList(verifier))
	if err != nil {
		fail("checkpoint does not verify: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 {
		fail("checkpoint body has %d lines", len(lines))
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("checkpoint size %q: %v", lines[1], err)
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(raw) != tlog.HashSize {
		fail("checkpoint root %q is not a base64 hash", lines[2])
	}
	var root tlog.Hash
	copy(root[:], raw)
	return tree{origin: lines[0], size: size, root: root}
}

// tiles reads tiles over HTTP. Go's sumdb paths carry the height ("tile/8/L/N"); the C2SP
// paths do not ("tile/L/N"), and nothing else differs.
type tiles struct {
	prefix string
	read   int               // tiles fetched over HTTP
	seen   map[string][]byte // fetched once: the hash reader still checks every use against the root
}

func (t *tiles) Height() int { return height }

func (t *tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, tile := range ts {
		path := strings.Replace(tile.Path(), fmt.Sprintf("tile/%d/", height), "tile/", 1)
		data, ok := t.seen[path]
		if !ok {
			data = get(t.prefix + "/" + path)
			t.seen[path] = data
			t.read++
		}
		if len(data) != tile.W*tlog.HashSize {
			return nil, fmt.Errorf("%s: %d bytes, want %d", path, len(data), tile.W*tlog.HashSize)
		}
		out[i] = data
	}
	return out, nil
}

func (t *tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func entryPath(n int64, width int64) string {
	p := tlog.Tile{H: height, L: 0, N: n, W: int(width)}.Path()
	return strings.Replace(p, fmt.Sprintf("tile/%d/0/", height), "tile/entries/", 1)
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: tlogtiles PREFIX_URL VKEY [OLD_CHECKPOINT_FILE]")
	}
	prefix, vkey := strings.TrimRight(os.Args[1], "/"), os.Args[2]
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		fail("vkey: %v", err)
	}
	t := openCheckpoint(get(prefix+"/checkpoint"), verifier)
	reader := &tiles{prefix: prefix, seen: map[string][]byte{}}
	hashes := tlog.TileHashReader(tlog.Tree{N: t.size, Hash: t.root}, reader)

	th, err := tlog.TreeHash(t.size, hashes)
	if err != nil || th != t.root {
		fail("tree hash from tiles: %v (%v, want %v)", err, th, t.root)
	}
	entries := int64(0)
	for start := int64(0); start < t.size; start += 1 << height {
		width := t.size - start
		if width > 1<<height {
			width = 1 << height
		}
		bundle := get(prefix + "/" + entryPath(start>>height, width))
		for i := int64(0); i < width; i++ {
			if len(bundle) < 2 {
				fail("bundle at %d ends early", start)
			}
			n := int(bundle[0])<<8 | int(bundle[1])
			entry := bundle[2 : 2+n]
			bundle = bundle[2+n:]
			index := start + i
			leaf, err := hashes.ReadHashes([]int64{tlog.StoredHashIndex(0, index)})
			if err != nil {
				fail("leaf %d: %v", index, err)
			}
			if tlog.RecordHash(entry) != leaf[0] {
				fail("entry %d does not hash to its leaf", index)
			}
			proof, err := tlog.ProveRecord(t.size, index, hashes)
			if err != nil {
				fail("prove record %d: %v", index, err)
			}
			if err := tlog.CheckRecord(proof, t.size, t.root, index, leaf[0]); err != nil {
				fail("record %d: %v", index, err)
			}
			entries++
		}
		if len(bundle) != 0 {
			fail("bundle at %d has %d bytes too many", start, len(bundle))
		}
	}
	result := map[string]interface{}{
		"origin":          t.origin,
		"size":            t.size,
		"root":            base64.StdEncoding.EncodeToString(t.root[:]),
		"entries_checked": entries,
		"tiles_read":      reader.read,
	}
	if len(os.Args) > 3 {
		msg, err := os.ReadFile(os.Args[3])
		if err != nil {
			fail("old checkpoint: %v", err)
		}
		old := openCheckpoint(msg, verifier)
		proof, err := tlog.ProveTree(t.size, old.size, hashes)
		if err != nil {
			fail("prove tree %d -> %d: %v", old.size, t.size, err)
		}
		if err := tlog.CheckTree(proof, t.size, t.root, old.size, old.root); err != nil {
			fail("consistency %d -> %d: %v", old.size, t.size, err)
		}
		encoded := []string{}
		for _, h := range proof {
			encoded = append(encoded, base64.StdEncoding.EncodeToString(h[:]))
		}
		result["old_size"] = old.size
		result["consistency"] = encoded
	}
	out, _ := json.Marshal(result)
	fmt.Println(string(out))
}
