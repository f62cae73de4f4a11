package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"

	// Drivers for the URL schemes relayout accepts.
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
)

// Location is a bucket and a key prefix inside it. For a single object the
// prefix is the object's key.
type Location struct {
	Bucket *blob.Bucket
	// Prefix is the key prefix ("" for the bucket root). It never starts with
	// "/" and, for folders, ends with "/" unless empty.
	Prefix string
	// Name is what the user gave, for messages.
	Name string
	// Local is the local directory the bucket is rooted at, or "" for a
	// remote or in-memory bucket.
	Local string
	// Query is the URL's query, the driver's parameters (endpoint,
	// region, ...) that Name leaves out: "" for local folders.
	Query string
}

// Key joins the location's prefix and rel into an object key.
func (l Location) Key(rel string) string {
	if l.Prefix == "" {
		return rel
	}
	return strings.TrimSuffix(l.Prefix, "/") + "/" + rel
}

// Address is URL(rel) with the location's query: a URL that another
// process can open as this one did (the plan URL `relayout plan` prints
// for the tasks), where URL is for messages.
func (l Location) Address(rel string) string {
	if l.Query == "" {
		return l.URL(rel)
	}
	return l.URL(rel) + "?" + l.Query
}

// URL names the object rel under the location, for messages and manifests.
func (l Location) URL(rel string) string {
	base := strings.TrimSuffix(l.Name, "/")
	if rel == "" {
		return base
	}
	return base + "/" + rel
}

var (
	memMu      sync.Mutex
	memBuckets = map[string]*blob.Bucket{}
)

// MemBucket returns the process-wide in-memory bucket for mem://name.
func MemBucket(name string) *blob.Bucket {
	memMu.Lock()
	defer memMu.Unlock()
	b, ok := memBuckets[name]
	if !ok {
		b = memblob.OpenBucket(nil)
		memBuckets[name] = b
	}
	return b
}

// DropMemBucket forgets the in-memory bucket mem://name and its objects.
func DropMemBucket(name string) {
	memMu.Lock()
	defer memMu.Unlock()
	if b, ok := memBuckets[name]; ok {
		b.Close()
		delete(memBuckets, name)
	}
}

// buckets holds the process's open remote buckets by bucketKey: every
// location on one bucket, opened with the same parameters and environment,
// shares one client, so its connections and its credentials. A run opened
// a client per input URL (and one for its output), a dataset command one
// per part, and a Go training loop one per Dataset it made: each with its
// own connection pool (new TCP and TLS handshakes) and its own credential
// lookups (an STS call each under Kubernetes' web identity). Buckets are
// never closed: a batch command's lifetime is the process's.
var buckets = struct {
	sync.Mutex
	m map[string]*bucketOpen
}{m: map[string]*bucketOpen{}}

// bucketOpen is one bucket's open, done once: callers that find it under
// way wait for it, and only for it, so a slow open (a credential lookup
// that probes a metadata server) delays the locations on that bucket alone.
type bucketOpen struct {
	done chan struct{} // closed when b and err are set
	b    *blob.Bucket
	err  error
}

// credentialEnv are the prefixes of the environment variables that choose
// a store's endpoint and credentials when the URL does not (the AWS,
// Google and Azure SDKs' and gocloud's): a bucket opened again after one
// of them changed gets a client of its own.
var credentialEnv = []string{"AWS_", "GOOGLE_", "GCE_", "CLOUDSDK_", "STORAGE_EMULATOR_HOST", "AZURE_", "MSI_", "IDENTITY_", "HOME="}

// bucketKey is what decides which client a bucket URL (without a path)
// opens: the URL with its query in a canonical order, and the variables
// of credentialEnv.
func bucketKey(bu *url.URL) string {
	var k strings.Builder
	k.WriteString(bu.Scheme + "://" + bu.Host + "?" + bu.Query().Encode())
	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		for _, p := range credentialEnv {
			if strings.HasPrefix(kv, p) {
				k.WriteString("\x00" + kv)
				break
			}
		}
	}
	return k.String()
}

// openBucket returns the process's bucket for bu (a URL without a path),
// opening it the first time. A failed open is not kept: the callers that
// waited for it get its error, and the next call opens again. A caller
// whose ctx ends while another's open is under way stops waiting.
func openBucket(ctx context.Context, bu *url.URL) (*blob.Bucket, error) {
	key := bucketKey(bu)
	buckets.Lock()
	if o, ok := buckets.m[key]; ok {
		buckets.Unlock()
		select {
		case <-o.done:
			return o.b, o.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	o := &bucketOpen{done: make(chan struct{})}
	buckets.m[key] = o
	buckets.Unlock()
	o.err = fmt.Errorf("open bucket %s: the open did not finish", bu.Redacted()) // what waiters get if dialBucket panics
	defer func() {
		if o.err != nil {
			buckets.Lock()
			delete(buckets.m, key)
			buckets.Unlock()
		}
		close(o.done)
	}()
	// The bucket outlives the caller: what it keeps of the context (a
	// token source's) must not end with the caller's.
	o.b, o.err = dialBucket(context.WithoutCancel(ctx), bu)
	return o.b, o.err
}

// dialBucket opens a client for bu by its scheme.
func dialBucket(ctx context.Context, bu *url.URL) (*blob.Bucket, error) {
	switch bu.Scheme {
	case "s3":
		return openS3(ctx, bu)
	case "gs":
		return openGCS(ctx, bu)
	case "azblob":
		return openAzure(ctx, bu)
	}
	return blob.OpenBucket(ctx, bu.String())
}

// IsURL reports whether name is a URL with a scheme rather than a local path.
func IsURL(name string) bool {
	i := strings.Index(name, "://")
	return i > 0 && !strings.ContainsAny(name[:i], "/\\.")
}

// OpenDir opens name as a folder-like location, creating a local folder when
// create is set. Remote URLs are scheme://bucket/prefix?params.
func OpenDir(ctx context.Context, name string, create bool) (Location, error) {
	if !IsURL(name) || strings.HasPrefix(name, "file://") {
		dir := strings.TrimPrefix(name, "file://")
		abs, err := filepath.Abs(dir)
		if err != nil {
			return Location{}, errs.Usagef("bad path %q: %v", name, err)
		}
		if create {
			if err := os.MkdirAll(abs, 0o755); err != nil {
				return Location{}, classifyOS(fmt.Errorf("create %s: %w", abs, err))
			}
		}
		b, err := fileblob.OpenBucket(abs, &fileblob.Options{NoTempDir: true, Metadata: fileblob.MetadataDontWrite})
		if err != nil {
			return Location{}, classifyOS(fmt.Errorf("open folder %s: %w", abs, err))
		}
		return Location{Bucket: b, Name: strings.TrimSuffix(name, "/"), Local: abs}, nil
	}
	u, err := url.Parse(name)
	if err != nil {
		return Location{}, errs.Usagef("bad URL %q: %v", name, err)
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	var b *blob.Bucket
	if u.Scheme == "mem" {
		b = MemBucket(u.Host)
	} else {
		bu := *u
		bu.Path = ""
		if b, err = openBucket(ctx, &bu); err != nil {
			return Location{}, errs.Usagef("open bucket %s: %v", bu.String(), err)
		}
	}
	display := u.Scheme + "://" + u.Host + "/" + strings.TrimSuffix(prefix, "/")
	return Location{Bucket: b, Prefix: prefix, Name: strings.TrimSuffix(display, "/"), Query: u.RawQuery}, nil
}

// Object is one input object.
type Object struct {
	Loc   Location
	Key   string
	URL   string // display name
	Size  int64
	ETag  string
	MTime string // RFC 3339, UTC
	// LocalPath is set for local files, which are read with os.File.
	LocalPath string
	// Data, when set, is the object's bytes, read already (a small file
	// read whole to be hashed): its ReaderAt serves them and makes no
	// request.
	Data []byte
	// Rel is the object's slash-separated path as the input named it (a
	// local path as given and walked, an object's whole key): Hive
	// partition folders are read from it, as DuckDB reads them from the
	// whole path, so `--input events/date=2026-11-30/` has its date too.
	Rel string
}

// SameVersion reports whether o is the version of an object recorded
// earlier as size, etag and mtime (a plan's pin, a dataset's known input).
// Where the store gives an ETag, size and ETag decide: an ETag changes
// with the content (S3's MD5, a KMS-encrypted upload's own, Azure's
// version tag), while one upload's modification time can read a second
// apart between a listing and a HEAD (gofakes3 stamps them from two clock
// reads; a test pinning by listing and checking by HEAD failed when an
// upload straddled a second). Without an ETag (local files) the
// modification time decides with the size.
func (o Object) SameVersion(size int64, etag, mtime string) bool {
	if o.Size != size || o.ETag != etag {
		return false
	}
	return o.ETag != "" || o.MTime == mtime
}

// List expands the input names (local files, folders, globs or URLs naming an
// object or a prefix) into the Parquet objects they name: every object whose
// key ends in ".parquet" under a prefix, sorted by name within each input, in
// the order the inputs were given. A name that matches nothing is an error.
func List(ctx context.Context, names []string) ([]Object, error) {
	var out []Object
	seen := map[string]bool{}
	for _, name := range names {
		objs, err := list1(ctx, name)
		if err != nil {
			return nil, err
		}
		if len(objs) == 0 {
			return nil, errs.BadInputf("input %s: no *.parquet files found", name)
		}
		for _, o := range objs {
			if !seen[o.URL] {
				seen[o.URL] = true
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// statParallel is how many objects' attributes a listing asks for at once.
const statParallel = 16

func list1(ctx context.Context, name string) ([]Object, error) {
	if !IsURL(name) || strings.HasPrefix(name, "file://") {
		return listLocal(ctx, strings.TrimPrefix(name, "file://"))
	}
	loc, key, err := bucketRoot(ctx, name)
	if err != nil {
		return nil, err
	}
	// An exact object?
	if key != "" && !strings.HasSuffix(key, "/") {
		o, err := remoteObject(ctx, loc, key)
		if err == nil {
			return []Object{o}, nil
		}
		if gcerrors.Code(err) != gcerrors.NotFound {
			return nil, Classify(fmt.Errorf("stat %s: %w", name, err))
		}
		key += "/"
	}
	var out []Object
	it := loc.Bucket.List(&blob.ListOptions{Prefix: key})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, Classify(fmt.Errorf("list %s: %w", name, err))
		}
		if obj.IsDir || !strings.HasSuffix(strings.ToLower(obj.Key), ".parquet") || hiddenKey(obj.Key[len(key):]) {
			continue
		}
		o := objectFrom(loc, obj.Key, obj.Size, listedETag(obj), obj.ModTime.UTC().Format("2006-01-02T15:04:05Z"))
		o.Rel = obj.Key
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	// gocloud's listing passes S3's ETags on (listedETag), not every
	// driver's; fetch the others, several requests at once (one at a
	// time, 2,000 small files took 12 s of HEADs at 5 ms each).
	err = par.ForEach(ctx, len(out), statParallel, func(i int) error {
		if out[i].ETag != "" {
			return nil
		}
		attrs, err := loc.Bucket.Attributes(ctx, out[i].Key)
		if err != nil {
			return Classify(fmt.Errorf("stat %s: %w", out[i].URL, err))
		}
		out[i].ETag = attrs.ETag
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// bucketRoot opens the bucket a URL names (with its parameters), as a
// Location at the bucket's root named scheme://host, and returns the URL's
// key.
func bucketRoot(ctx context.Context, name string) (Location, string, error) {
	u, err := url.Parse(name)
	if err != nil {
		return Location{}, "", errs.Usagef("bad URL %q: %v", name, err)
	}
	loc, err := OpenDir(ctx, name, false)
	if err != nil {
		return Location{}, "", err
	}
	loc.Prefix, loc.Name = "", u.Scheme+"://"+u.Host
	return loc, strings.TrimPrefix(u.Path, "/"), nil
}

// remoteObject is the object key of loc (a bucket root) with its current
// attributes (a HEAD).
func remoteObject(ctx context.Context, loc Location, key string) (Object, error) {
	attrs, err := loc.Bucket.Attributes(ctx, key)
	if err != nil {
		return Object{}, err
	}
	o := objectFrom(loc, key, attrs.Size, attrs.ETag, attrs.ModTime.UTC().Format("2006-01-02T15:04:05Z"))
	o.Rel = key
	return o, nil
}

// listedETag is the ETag an S3 listing returned for obj (as HeadObject
// returns it, quotes included), or "" where the driver does not pass it on.
func listedETag(obj *blob.ListObject) string {
	var so s3types.Object
	if obj.As(&so) {
		return aws.ToString(so.ETag)
	}
	return ""
}

// hiddenKey reports whether a relative key has a path element starting with
// "_" or ".", which by Hive/Spark convention are not data (e.g. _temporary).
func hiddenKey(rel string) bool {
	for _, p := range strings.Split(rel, "/") {
		if strings.HasPrefix(p, "_") || strings.HasPrefix(p, ".") {
			return true
		}
	}
	return false
}

func objectFrom(loc Location, key string, size int64, etag, mtime string) Object {
	return Object{Loc: loc, Key: key, URL: loc.URL(key), Size: size, ETag: etag, MTime: mtime}
}

func listLocal(ctx context.Context, name string) ([]Object, error) {
	var files []string
	if strings.ContainsAny(name, "*?[") {
		m, err := filepath.Glob(name)
		if err != nil {
			return nil, errs.Usagef("bad glob %q: %v", name, err)
		}
		for _, f := range m {
			if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
				files = append(files, f)
			}
		}
	} else {
		st, err := os.Stat(name)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, errs.BadInputf("input %s: no such file or folder", name)
			}
			return nil, classifyOS(fmt.Errorf("input %s: %w", name, err))
		}
		if st.IsDir() {
			err := filepath.WalkDir(name, func(p string, d os.DirEntry, err error) error {
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(name, p)
				if d.IsDir() {
					if p != name && hiddenKey(filepath.ToSlash(rel)) {
						return filepath.SkipDir
					}
					return nil
				}
				if strings.HasSuffix(strings.ToLower(p), ".parquet") && !hiddenKey(filepath.ToSlash(rel)) {
					files = append(files, p)
				}
				return nil
			})
			if err != nil {
				return nil, classifyOS(fmt.Errorf("list %s: %w", name, err))
			}
		} else {
			files = []string{name}
		}
	}
	sort.Strings(files)
	out := make([]Object, 0, len(files))
	for _, f := range files {
		o, err := localObject(f)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// localObject is the local file f (a path as given or walked) as an Object.
func localObject(f string) (Object, error) {
	st, err := os.Stat(f)
	if err != nil {
		return Object{}, classifyOS(fmt.Errorf("stat %s: %w", f, err))
	}
	abs, _ := filepath.Abs(f)
	return Object{
		Rel:       filepath.ToSlash(f),
		Key:       path.Base(filepath.ToSlash(abs)),
		URL:       f,
		Size:      st.Size(),
		MTime:     st.ModTime().UTC().Format("2006-01-02T15:04:05Z"),
		LocalPath: abs,
	}, nil
}

// Pinned returns the objects List named urls (a local path as walked, or
// scheme://bucket/key) with their current attributes, without listing: a
// stat or HEAD each, a remote one's bucket opened with the parameters of
// the first of names (the input names as given to List) on the same
// bucket. A task that reads a few pinned files of a large input asks for
// those alone, not for a listing of the whole input (one LIST request per
// 1,000 objects). An object that is gone is reported as such; the caller
// compares the rest with its pins.
func Pinned(ctx context.Context, names []string, urls []string) ([]Object, error) {
	out := make([]Object, len(urls))
	locs := map[string]Location{} // scheme://host -> its bucket
	for i, name := range urls {
		if !IsURL(name) || strings.HasPrefix(name, "file://") {
			o, err := localObject(strings.TrimPrefix(name, "file://"))
			if err != nil {
				return nil, err
			}
			out[i] = o
			continue
		}
		u, err := url.Parse(name)
		if err != nil {
			return nil, errs.Usagef("bad URL %q: %v", name, err)
		}
		bucket := u.Scheme + "://" + u.Host
		loc, ok := locs[bucket]
		if !ok {
			var from string
			for _, n := range names {
				if v, err := url.Parse(n); err == nil && IsURL(n) && v.Scheme+"://"+v.Host == bucket {
					from = n
					break
				}
			}
			if from == "" {
				return nil, errs.Usagef("input %s is in none of the inputs %q", name, names)
			}
			if loc, _, err = bucketRoot(ctx, from); err != nil {
				return nil, err
			}
			locs[bucket] = loc
		}
		if out[i], err = remoteObject(ctx, loc, strings.TrimPrefix(u.Path, "/")); err != nil {
			return nil, Classify(fmt.Errorf("stat %s: %w", name, err))
		}
	}
	return out, nil
}
