package pool

import (
	"errors"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuroute/gpuroute/scoring"
)

// Node labels that name a node's GPU, read in this order.
const (
	// LabelNVIDIAProduct is set by NVIDIA's GPU feature discovery:
	// the product name with spaces as dashes ("NVIDIA-H100-80GB-HBM3"),
	// with "-MIG-<profile>" for a MIG slice and "-SHARED" for a
	// time-sliced GPU.
	LabelNVIDIAProduct = "nvidia.com/gpu.product"
	// LabelAMDProduct is set by AMD's GPU node labeller
	// ("AMD_Instinct_MI300X_OAM").
	LabelAMDProduct = "amd.com/gpu.product-name"
	// LabelGKEAccelerator is set by GKE on GPU node pools ("nvidia-l4").
	LabelGKEAccelerator = "cloud.google.com/gke-accelerator"
)

// productLabels are the GPU labels read, first present wins.
var productLabels = []string{LabelNVIDIAProduct, LabelAMDProduct, LabelGKEAccelerator}

// HardwareMap maps a node's GPU label to a plugin hardware profile.
//
// The zero value uses DefaultHardware and the profiles of this build
// (scoring.LookupHardware): a product whose profile the plugin does not have
// yet leaves the replica on the plugin's default profile, with a warning,
// and gets its own as soon as a build has it. An exact entry of Products
// wins over the model tokens.
type HardwareMap struct {
	// Products maps a whole label value to a profile, as given with
	// --hardware-map; the profile is passed on unchanged.
	Products map[string]string
	// Tokens maps a model token of the label (split at '-', '_' and
	// spaces, compared in upper case) to a profile; nil is DefaultHardware.
	Tokens map[string]string
}

// DefaultHardware maps GPU model tokens to profile names.
var DefaultHardware = map[string]string{
	"H100": scoring.HardwareH100, "A100": scoring.HardwareA100, "L40S": scoring.HardwareL40S, "L4": scoring.HardwareL4,
	"H200": scoring.HardwareH200, "B200": scoring.HardwareB200, "MI300X": scoring.HardwareMI300X,
}

// fractionTokens mark a part of a GPU: a MIG slice or a time-sliced GPU is
// slower than the card's profile, so its label maps to no profile.
var fractionTokens = []string{"MIG", "SHARED"}

// nodeProfile returns the profile for the node's GPU label, "" for none,
// and a warning when the label is there but names no usable profile.
func (m HardwareMap) nodeProfile(n *corev1.Node) (string, error) {
	if n == nil {
		return "", nil
	}
	for _, label := range productLabels {
		v, ok := n.Labels[label]
		if !ok {
			continue
		}
		profile, err := m.profile(v)
		if err != nil {
			return "", errors.New("node " + n.Name + " label " + label + "=" + quote(v) + ": " + err.Error() + "; the plugin's default profile applies")
		}
		return profile, nil
	}
	return "", nil
}

// profile maps one label value.
func (m HardwareMap) profile(product string) (string, error) {
	if p, ok := m.Products[product]; ok {
		return p, nil
	}
	tokens := m.Tokens
	if tokens == nil {
		tokens = DefaultHardware
	}
	words := strings.FieldsFunc(strings.ToUpper(product), func(r rune) bool { return r == '-' || r == '_' || r == ' ' })
	for _, w := range words {
		for _, f := range fractionTokens {
			if w == f {
				return "", errors.New("a fraction of a GPU (" + f + ") has no profile")
			}
		}
	}
	for _, w := range words {
		p, ok := tokens[w]
		if !ok {
			continue
		}
		if _, known := scoring.LookupHardware(p); !known {
			return "", errors.New("profile " + strconv.Quote(p) + " is not in this build of gpuroute")
		}
		return p, nil
	}
	return "", errors.New("no profile for this GPU (give one with --hardware-map or the " + AnnotationHardware + " annotation)")
}
