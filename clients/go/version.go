// The client's version, which follows the contract's.

package stepwell

// Version is this client's version. Its major and minor numbers are those of
// the stepwell.v1 contract it was generated from (proto/VERSION in the
// repository); the patch number moves for fixes in the client alone. Tag a
// release of this module as clients/go/vVERSION.
const Version = "1.3.0"
