// Command upstream-allocator runs upstream Kubernetes' own structured-parameters allocator
// (k8s.io/dynamic-resource-allocation/structured, the code inside kube-scheduler's
// DynamicResources plugin) for one node, so that dra-solver can compare its answers with the
// real thing rather than with a port.
//
// Protocol: stdin holds one or more JSON requests (one per line, or simply concatenated); for
// each, exactly one JSON line is written to stdout and flushed, in order. A caller can
// therefore either pipe a whole batch through one process or keep the process open and talk
// to it request by request. The process exits 0 at end of input; a request that cannot be
// decoded gets a response with verdict "error", the stream carries on.
//
// Request:
//
//	{"id": "...",                       echoed back
//	 "node": <v1 Node>,
//	 "classes": [<DeviceClass>], "slices": [<ResourceSlice>], "taintRules": [<DeviceTaintRule>],
//	 "claims": [<ResourceClaim>],       to allocate together, in this order
//	 "allocatedClaims": [<ResourceClaim>],  claims whose status.allocation holds devices
//	 "allocatedDevices": [{"driver","pool","device"}],
//	 "allocatedSharedDevices": [{"driver","pool","device","shareID"}],
//	 "allocatedCapacity": [{"driver","pool","device","capacity": {"name": "<quantity>"}}],
//	 "features": {"AdminAccess": true, ...},   structured.Features field names; absent = off
//	 "timeoutSeconds": 10,              0 or absent: no deadline
//	 "tier": ""}                        "", or force "stable", "incubating", "experimental"
//
// Response:
//
//	{"id", "verdict": "allocated"|"unsatisfiable"|"error"|"timeout",
//	 "results": [<AllocationResult>] (allocated only, one per claim, as Go marshals them),
//	 "error": "<Go error text>", "nodeLocal": <errors.Is(err, ErrFailedAllocationOnNode)>,
//	 "elapsedSeconds": <time spent inside Allocate only>, "tier": "<implementation used>",
//	 "steps": <allocateOne invocations, when the tier counts them>}
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// tiers lists upstream's implementations from the most stable one: NewAllocator picks the
// first that supports every requested feature, and so does tierFor.
var tiers = []string{"stable", "incubating", "experimental"}

type deviceRef struct {
	Driver   string                       `json:"driver"`
	Pool     string                       `json:"pool"`
	Device   string                       `json:"device"`
	ShareID  string                       `json:"shareID,omitempty"`
	Capacity map[string]resource.Quantity `json:"capacity,omitempty"`
}

type request struct {
	ID                     string                         `json:"id,omitempty"`
	Node                   *v1.Node                       `json:"node"`
	Classes                []*resourceapi.DeviceClass     `json:"classes"`
	Slices                 []*resourceapi.ResourceSlice   `json:"slices"`
	TaintRules             []*resourceapi.DeviceTaintRule `json:"taintRules"`
	Claims                 []*resourceapi.ResourceClaim   `json:"claims"`
	AllocatedClaims        []*resourceapi.ResourceClaim   `json:"allocatedClaims"`
	AllocatedDevices       []deviceRef                    `json:"allocatedDevices"`
	AllocatedSharedDevices []deviceRef                    `json:"allocatedSharedDevices"`
	AllocatedCapacity      []deviceRef                    `json:"allocatedCapacity"`
	Features               structured.Features            `json:"features"`
	TimeoutSeconds         float64                        `json:"timeoutSeconds"`
	Tier                   string                         `json:"tier"`
}

type response struct {
	ID             string                         `json:"id,omitempty"`
	Verdict        string                         `json:"verdict"`
	Results        []resourceapi.AllocationResult `json:"results,omitempty"`
	Error          string                         `json:"error,omitempty"`
	NodeLocal      bool                           `json:"nodeLocal,omitempty"`
	ElapsedSeconds float64                        `json:"elapsedSeconds"`
	Tier           string                         `json:"tier,omitempty"`
	Steps          *int64                         `json:"steps,omitempty"`
}

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: upstream-allocator < requests.jsonl > responses.jsonl (see the package comment)")
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	dec := json.NewDecoder(bufio.NewReaderSize(os.Stdin, 1<<20))
	caches := map[cel.Features]*cel.Cache{}
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			// The stream itself is broken (not one bad request): say so and stop.
			writeLine(out, response{Verdict: "error", Error: fmt.Sprintf("read request: %v", err)})
			os.Exit(2)
		}
		writeLine(out, handle(raw, caches))
	}
}

func writeLine(out *bufio.Writer, resp response) {
	line, err := json.Marshal(resp)
	if err != nil {
		line, _ = json.Marshal(response{ID: resp.ID, Verdict: "error", Error: fmt.Sprintf("encode response: %v", err)})
	}
	_, _ = out.Write(append(line, '\n'))
	_ = out.Flush()
}

func handle(raw json.RawMessage, caches map[cel.Features]*cel.Cache) response {
	var req request
	if err := json.Unmarshal(raw, &req); err != nil {
		var probe struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(raw, &probe)
		return response{ID: probe.ID, Verdict: "error", Error: fmt.Sprintf("decode request: %v", err)}
	}
	resp := response{ID: req.ID}
	if req.Node == nil {
		req.Node = &v1.Node{}
	}
	state, err := allocatedState(&req)
	if err != nil {
		resp.Verdict, resp.Error = "error", err.Error()
		return resp
	}
	tier, err := tierFor(req.Features, req.Tier)
	if err != nil {
		resp.Verdict, resp.Error = "error", err.Error()
		return resp
	}
	resp.Tier = tier
	// As the scheduler does: one CEL cache (10 entries) per set of CEL-relevant features,
	// reused across requests.
	celFeatures := cel.Features{
		EnableConsumableCapacity: req.Features.ConsumableCapacity,
		EnableListTypeAttributes: req.Features.ListTypeAttributes,
	}
	cache := caches[celFeatures]
	if cache == nil {
		cache = cel.NewCache(10, celFeatures)
		caches[celFeatures] = cache
	}

	ctx := context.Background()
	if req.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutSeconds*float64(time.Second)))
		defer cancel()
	}
	structured.EnableAllocators(tier)
	defer structured.EnableAllocators()
	slices := withTaintRules(req.Slices, req.TaintRules, req.Features.DeviceTaints)
	allocator, err := structured.NewAllocator(ctx, req.Features, state, classLister(req.Classes), slices, cache)
	if err != nil {
		resp.Verdict, resp.Error = "error", err.Error()
		return resp
	}
	start := time.Now()
	results, err := allocator.Allocate(ctx, req.Node, req.Claims)
	resp.ElapsedSeconds = time.Since(start).Seconds()
	resp.Steps = steps(allocator)
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		resp.Verdict, resp.Error = "timeout", err.Error()
	case err != nil:
		resp.Verdict, resp.Error = "error", err.Error()
		resp.NodeLocal = errors.Is(err, structured.ErrFailedAllocationOnNode)
	case results == nil && len(req.Claims) > 0:
		resp.Verdict = "unsatisfiable"
	default:
		resp.Verdict, resp.Results = "allocated", results
	}
	return resp
}

// tierFor names the implementation NewAllocator will use: the first one, most stable first,
// that accepts the features (found by letting NewAllocator try each tier alone, so the answer
// follows upstream's own feature tables, which are internal to its module).
func tierFor(features structured.Features, forced string) (string, error) {
	candidates := tiers
	if forced != "" {
		candidates = []string{forced}
	}
	defer structured.EnableAllocators()
	var lastErr error
	for _, tier := range candidates {
		structured.EnableAllocators(tier)
		_, err := structured.NewAllocator(context.Background(), features, structured.AllocatedState{}, classLister(nil), nil, nil)
		if err == nil {
			return tier, nil
		}
		lastErr = err
	}
	if forced != "" {
		return "", fmt.Errorf("tier %q: %w", forced, lastErr)
	}
	return "", lastErr
}

// steps reads the allocator's allocateOne counter. GetStats returns a type internal to
// upstream's module, so it is reached by reflection; tiers without it report nothing.
func steps(allocator structured.Allocator) *int64 {
	method := reflect.ValueOf(allocator).MethodByName("GetStats")
	if !method.IsValid() || method.Type().NumIn() != 0 || method.Type().NumOut() != 1 {
		return nil
	}
	stats := method.Call(nil)[0]
	if stats.Kind() != reflect.Struct {
		return nil
	}
	field := stats.FieldByName("NumAllocateOneInvocations")
	if !field.IsValid() || field.Kind() != reflect.Int64 {
		return nil
	}
	n := field.Int()
	return &n
}

// allocatedState gathers devices in use the way the scheduler's claim tracker does for
// allocated claims (admin access holds nothing, a shareID marks a share, consumed capacity
// adds up per device), plus devices given directly by ID.
func allocatedState(req *request) (structured.AllocatedState, error) {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for i, claim := range req.AllocatedClaims {
		if claim == nil || claim.Status.Allocation == nil {
			return state, fmt.Errorf("allocatedClaims[%d]: status.allocation: Required value", i)
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if result.AdminAccess != nil && *result.AdminAccess {
				continue
			}
			if result.ShareID == nil {
				state.AllocatedDevices.Insert(id)
			} else {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, result.ShareID))
			}
			if result.ConsumedCapacity != nil {
				state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
			}
		}
	}
	for _, d := range req.AllocatedDevices {
		state.AllocatedDevices.Insert(structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
	}
	for _, d := range req.AllocatedSharedDevices {
		share := types.UID(d.ShareID)
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(structured.MakeDeviceID(d.Driver, d.Pool, d.Device), &share))
	}
	for _, d := range req.AllocatedCapacity {
		consumed := map[resourceapi.QualifiedName]resource.Quantity{}
		for name, amount := range d.Capacity {
			consumed[resourceapi.QualifiedName(name)] = amount
		}
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(structured.MakeDeviceID(d.Driver, d.Pool, d.Device), consumed))
	}
	return state, nil
}

// withTaintRules adds the taint of each DeviceTaintRule (in name order) to the devices its
// selector matches, as the scheduler's ResourceSlice tracker does before slices reach the
// allocator. Without the DeviceTaints feature the tracker ignores rules, and so does this.
func withTaintRules(slices []*resourceapi.ResourceSlice, rules []*resourceapi.DeviceTaintRule, enabled bool) []*resourceapi.ResourceSlice {
	if !enabled || len(rules) == 0 {
		return slices
	}
	sorted := append([]*resourceapi.DeviceTaintRule(nil), rules...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	out := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, slice := range slices {
		patched := slice
		for _, rule := range sorted {
			sel := rule.Spec.DeviceSelector
			if sel == nil || (sel.Driver != nil && *sel.Driver != slice.Spec.Driver) || (sel.Pool != nil && *sel.Pool != slice.Spec.Pool.Name) {
				continue
			}
			for i, device := range slice.Spec.Devices {
				if sel.Device != nil && *sel.Device != device.Name {
					continue
				}
				if patched == slice {
					patched = slice.DeepCopy()
				}
				patched.Spec.Devices[i].Taints = append(patched.Spec.Devices[i].Taints, rule.Spec.Taint)
			}
		}
		out = append(out, patched)
	}
	return out
}

// listerOfClasses answers like the scheduler's informer-backed DeviceClass lister, including
// its NotFound error text.
type listerOfClasses map[string]*resourceapi.DeviceClass

func classLister(classes []*resourceapi.DeviceClass) listerOfClasses {
	lister := listerOfClasses{}
	for _, class := range classes {
		if class != nil {
			lister[class.Name] = class
		}
	}
	return lister
}

func (l listerOfClasses) List() ([]*resourceapi.DeviceClass, error) {
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]*resourceapi.DeviceClass, 0, len(names))
	for _, name := range names {
		out = append(out, l[name])
	}
	return out, nil
}

func (l listerOfClasses) Get(name string) (*resourceapi.DeviceClass, error) {
	if class, ok := l[name]; ok {
		return class, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclass"), name)
}
