// Package gen writes a realistic flattened recommendation impression log for
// tests, benchmarks and the demo: one row per (query, item) impression, the
// query-level features repeated on every item row, Zipf-skewed slice columns
// (country, date) and rows in arrival order, so every slice is scattered over
// every row group. Files are written with parquet-go, a different library from
// the arrow-go reader relayout uses, with zstd and 64Ki-row row groups.
//
// The output is a pure function of Options: same options, same bytes.
package gen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// Impression is one row. Columns tagged "query-level" are constant within a
// query_id; the others vary per item.
type Impression struct {
	EventTime  time.Time `parquet:"event_time,timestamp(millisecond)"`
	Country    string    `parquet:"country"`
	Date       int32     `parquet:"date,date"` // days since 1970-01-01
	QueryID    int64     `parquet:"query_id"`
	UserID     int64     `parquet:"user_id"`              // query-level
	SessionID  string    `parquet:"session_id"`           // query-level
	Device     string    `parquet:"device"`               // query-level
	OS         string    `parquet:"os"`                   // query-level
	AppVersion string    `parquet:"app_version"`          // query-level
	UserAge    int32     `parquet:"user_age"`             // query-level
	UserGender *string   `parquet:"user_gender,optional"` // query-level, nullable
	UserF0     float32   `parquet:"user_f0"`
	UserF1     float32   `parquet:"user_f1"`
	UserF2     float32   `parquet:"user_f2"`
	UserF3     float32   `parquet:"user_f3"`
	UserF4     float32   `parquet:"user_f4"`
	UserF5     float32   `parquet:"user_f5"`
	UserF6     float32   `parquet:"user_f6"`
	UserF7     float32   `parquet:"user_f7"`
	QueryEmb   []float32 `parquet:"query_embedding,list"` // query-level, 8 dims
	QueryText  string    `parquet:"query_text"`           // query-level
	ItemID     int64     `parquet:"item_id"`
	Position   int32     `parquet:"position"`
	ItemCat    string    `parquet:"item_category"`
	ItemPrice  float64   `parquet:"item_price"`
	ItemF0     float32   `parquet:"item_f0"`
	ItemF1     float32   `parquet:"item_f1"`
	ItemF2     float32   `parquet:"item_f2"`
	ItemF3     float32   `parquet:"item_f3"`
	ItemF4     float32   `parquet:"item_f4"`
	ItemF5     float32   `parquet:"item_f5"`
	ItemF6     float32   `parquet:"item_f6"`
	ItemF7     float32   `parquet:"item_f7"`
	ItemTags   []string  `parquet:"item_tags,list"`
	Score      float64   `parquet:"model_score"`
	Click      *int32    `parquet:"click,optional"`    // label, null = not yet joined
	DwellMs    *int64    `parquet:"dwell_ms,optional"` // null unless clicked
	Purchase   bool      `parquet:"purchase"`
	Weight     float32   `parquet:"sample_weight"`
	Experiment int32     `parquet:"experiment_id"` // query-level
}

// QueryLevelColumns lists the columns the generator keeps constant per query.
var QueryLevelColumns = []string{
	"event_time", "country", "date", "query_id", "user_id", "session_id", "device", "os", "app_version",
	"user_age", "user_gender", "user_f0", "user_f1", "user_f2", "user_f3", "user_f4", "user_f5",
	"user_f6", "user_f7", "query_embedding", "query_text", "experiment_id",
}

// Options sizes the log.
type Options struct {
	Rows      int64   // total rows (default 100,000)
	Files     int     // number of files (default 4)
	Countries int     // distinct countries (default 40)
	Days      int     // distinct dates (default 30)
	ItemsMean float64 // mean items per query (default 12)
	Seed      uint64
	// RowGroupRows is parquet-go's rows per row group (default 65536).
	RowGroupRows int64
}

func (o *Options) defaults() {
	if o.Rows == 0 {
		o.Rows = 100_000
	}
	if o.Files == 0 {
		o.Files = 4
	}
	if o.Countries == 0 {
		o.Countries = 40
	}
	if o.Days == 0 {
		o.Days = 30
	}
	if o.ItemsMean == 0 {
		o.ItemsMean = 12
	}
	if o.RowGroupRows == 0 {
		o.RowGroupRows = 64 << 10
	}
}

var (
	devices    = []string{"ios", "android", "web", "tv"}
	oses       = []string{"ios17", "ios18", "android13", "android14", "android15", "windows", "macos", "linux"}
	categories = []string{"books", "music", "video", "games", "apps", "news", "sports", "food", "travel", "fashion", "home", "toys"}
	genders    = []string{"f", "m", "x"}
	tags       = []string{"new", "sale", "popular", "editor", "local", "trending"}
)

// Write generates the log into dir as part-N.parquet files and returns their
// paths.
func Write(dir string, o Options) ([]string, error) {
	o.defaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	countryZipf := zipfTable(o.Countries, 1.1)
	dayZipf := zipfTable(o.Days, 0.8)
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	perFile := (o.Rows + int64(o.Files) - 1) / int64(o.Files)
	var paths []string
	var row, q int64
	for fi := 0; fi < o.Files; fi++ {
		path := filepath.Join(dir, fmt.Sprintf("part-%d.parquet", fi))
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		w := parquet.NewGenericWriter[Impression](f,
			parquet.Compression(&zstd.Codec{Level: zstd.SpeedDefault}),
			parquet.MaxRowsPerRowGroup(o.RowGroupRows),
			parquet.DataPageVersion(1),
			parquet.CreatedBy("relayout-gen", "1", ""),
		)
		end := min(row+perFile, o.Rows)
		buf := make([]Impression, 0, 1024)
		for row < end {
			q++
			n := int64(1 + rng.ExpFloat64()*(o.ItemsMean-1))
			n = min(n, end-row)
			qrow := queryRow(rng, q, base, countryZipf, dayZipf, row)
			for i := int64(0); i < n; i++ {
				r := qrow
				itemRow(rng, &r, int32(i))
				buf = append(buf, r)
				if len(buf) == cap(buf) {
					if _, err := w.Write(buf); err != nil {
						f.Close()
						return nil, err
					}
					buf = buf[:0]
				}
			}
			row += n
		}
		if _, err := w.Write(buf); err != nil {
			f.Close()
			return nil, err
		}
		if err := w.Close(); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func zipfTable(n int, s float64) []float64 {
	cum := make([]float64, n)
	var sum float64
	for i := 0; i < n; i++ {
		sum += 1 / math.Pow(float64(i+1), s)
		cum[i] = sum
	}
	for i := range cum {
		cum[i] /= sum
	}
	return cum
}

func draw(rng *rand.Rand, cum []float64) int {
	u := rng.Float64()
	lo, hi := 0, len(cum)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if cum[mid] < u {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

func queryRow(rng *rand.Rand, q int64, base time.Time, cz, dz []float64, row int64) Impression {
	day := draw(rng, dz)
	date := base.AddDate(0, 0, -day)
	user := int64(rng.IntN(200_000))
	r := Impression{
		EventTime:  date.Add(time.Duration(rng.IntN(86_400_000)) * time.Millisecond),
		Country:    fmt.Sprintf("C%02d", draw(rng, cz)),
		Date:       int32(date.Unix() / 86400),
		QueryID:    q,
		UserID:     user,
		SessionID:  fmt.Sprintf("s-%x", rng.Uint64()&0xffffffffff),
		Device:     devices[rng.IntN(len(devices))],
		OS:         oses[rng.IntN(len(oses))],
		AppVersion: fmt.Sprintf("7.%d.%d", rng.IntN(5), rng.IntN(20)),
		UserAge:    int32(16 + rng.IntN(60)),
		UserF0:     float32(rng.NormFloat64()),
		UserF1:     float32(rng.NormFloat64()),
		UserF2:     float32(rng.Float64()),
		UserF3:     float32(rng.IntN(100)),
		UserF4:     float32(rng.NormFloat64()),
		UserF5:     float32(rng.ExpFloat64()),
		UserF6:     float32(rng.IntN(7)),
		UserF7:     float32(rng.NormFloat64()),
		QueryText:  fmt.Sprintf("q%d", rng.IntN(50_000)),
		Experiment: int32(rng.IntN(8)),
	}
	if rng.IntN(10) > 0 {
		g := genders[rng.IntN(len(genders))]
		r.UserGender = &g
	}
	r.QueryEmb = make([]float32, 8)
	for i := range r.QueryEmb {
		r.QueryEmb[i] = float32(rng.NormFloat64())
	}
	return r
}

func itemRow(rng *rand.Rand, r *Impression, pos int32) {
	r.ItemID = int64(rng.IntN(1_000_000))
	r.Position = pos
	r.ItemCat = categories[rng.IntN(len(categories))]
	r.ItemPrice = math.Round(rng.ExpFloat64()*2000) / 100
	r.ItemF0 = float32(rng.NormFloat64())
	r.ItemF1 = float32(rng.Float64())
	r.ItemF2 = float32(rng.IntN(1000))
	r.ItemF3 = float32(rng.NormFloat64())
	r.ItemF4 = float32(rng.IntN(5))
	r.ItemF5 = float32(rng.ExpFloat64())
	r.ItemF6 = float32(rng.NormFloat64())
	r.ItemF7 = float32(rng.IntN(2))
	nt := rng.IntN(3)
	r.ItemTags = make([]string, nt)
	for i := range r.ItemTags {
		r.ItemTags[i] = tags[rng.IntN(len(tags))]
	}
	r.Score = rng.Float64()
	if rng.IntN(20) > 0 { // 5% labels not yet joined
		c := int32(0)
		if rng.Float64() < 0.08/float64(1+pos/4) {
			c = 1
			d := int64(rng.ExpFloat64() * 30_000)
			r.DwellMs = &d
		}
		r.Click = &c
	} else {
		r.Click, r.DwellMs = nil, nil
	}
	if r.Click == nil || *r.Click == 0 {
		r.DwellMs = nil
	}
	r.Purchase = r.Click != nil && *r.Click == 1 && rng.IntN(10) == 0
	r.Weight = 1 / float32(1+pos) // item-level: position-discounted
}
