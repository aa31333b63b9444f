package dev.stepwell;

import io.grpc.CallCredentials;
import io.grpc.Metadata;
import java.util.concurrent.Executor;

/**
 * The call credential of {@link StepwellClient.Builder#token}: {@code authorization: Bearer
 * <token>} on every call. {@link #toString()} keeps the token out of anything that prints it (call
 * options and stubs print their credentials).
 */
final class BearerToken extends CallCredentials {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final String header;

  BearerToken(String token) {
    if (token == null || token.isEmpty()) {
      throw new IllegalArgumentException("stepwell: the token is empty");
    }
    // The check names what is wrong, never the token itself.
    for (int i = 0; i < token.length(); i++) {
      char ch = token.charAt(i);
      if (ch < 0x21 || ch > 0x7e) {
        throw new IllegalArgumentException(
            "stepwell: the token has a character outside printable ASCII");
      }
    }
    this.header = "Bearer " + token;
  }

  @Override
  public void applyRequestMetadata(
      RequestInfo requestInfo, Executor appExecutor, MetadataApplier applier) {
    Metadata md = new Metadata();
    md.put(AUTHORIZATION, header);
    applier.apply(md);
  }

  @Override
  public String toString() {
    return "BearerToken[redacted]";
  }
}
