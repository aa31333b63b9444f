package dev.stepwell;

import static org.junit.jupiter.api.Assertions.*;

import com.google.protobuf.Any;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import dev.stepwell.v1.Wait;
import dev.stepwell.v1.WaitSettled;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.io.IOException;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** {@link Errors#decode}, fed each reason and code, without a sidecar. */
class ErrorsTest {
  private static StatusRuntimeException status(Status.Code code, String reason, Any... more) {
    com.google.rpc.Status.Builder s =
        com.google.rpc.Status.newBuilder().setCode(code.value()).setMessage("m");
    if (reason != null) {
      s.addDetails(
          Any.pack(
              ErrorInfo.newBuilder()
                  .setReason(reason)
                  .setDomain(StepwellException.DOMAIN)
                  .putMetadata("k", "v")
                  .build()));
    }
    for (Any a : more) s.addDetails(a);
    return StatusProto.toStatusRuntimeException(s.build());
  }

  @Test
  void eachReasonNamesItsException() {
    Map<String, Class<? extends StepwellException>> byReason =
        Map.ofEntries(
            Map.entry("CHECKPOINT_CONFLICT", CheckpointConflictException.class),
            Map.entry("WORKFLOW_VERSION_MISMATCH", WorkflowVersionMismatchException.class),
            Map.entry("KEY_REUSED", KeyReusedException.class),
            Map.entry("LEASE_LOST", LeaseLostException.class),
            Map.entry("NOT_ACQUIRED", NotAcquiredException.class),
            Map.entry("RESULT_MISMATCH", ResultMismatchException.class),
            Map.entry("WAIT_NOT_FOUND", WaitNotFoundException.class),
            Map.entry("WAITS_PER_TURN", WaitsPerTurnException.class),
            Map.entry("KEY_NOT_FOUND", KeyNotFoundException.class),
            Map.entry("OVERLOADED", OverloadedException.class),
            Map.entry("MESSAGE_TOO_LARGE", MessageTooLargeException.class),
            Map.entry("STORE_FULL", StoreFullException.class),
            Map.entry("UNAUTHENTICATED", UnauthenticatedException.class),
            Map.entry("PERMISSION_DENIED", PermissionDeniedException.class),
            Map.entry("WAIT_SETTLED", WaitSettledException.class));
    for (var e : byReason.entrySet()) {
      StepwellException se = Errors.decode(status(Status.Code.FAILED_PRECONDITION, e.getKey()));
      assertEquals(e.getValue(), se.getClass(), e.getKey());
      assertEquals(e.getKey(), se.reason());
      assertEquals(Status.Code.FAILED_PRECONDITION, se.code());
      assertEquals("m", se.statusMessage());
      assertEquals(Map.of("k", "v"), se.metadata());
      assertEquals("FAILED_PRECONDITION " + e.getKey() + ": m", se.getMessage());
    }
  }

  @Test
  void withoutAKnownReasonTheCodeDecides() {
    Map<Status.Code, Class<? extends StepwellException>> byCode =
        Map.of(
            Status.Code.INVALID_ARGUMENT, InvalidArgumentException.class,
            Status.Code.UNAVAILABLE, UnavailableException.class,
            Status.Code.UNAUTHENTICATED, UnauthenticatedException.class,
            Status.Code.PERMISSION_DENIED, PermissionDeniedException.class,
            Status.Code.RESOURCE_EXHAUSTED, OverloadedException.class,
            Status.Code.NOT_FOUND, StepwellException.class,
            Status.Code.DEADLINE_EXCEEDED, StepwellException.class);
    for (var e : byCode.entrySet()) {
      for (String reason : new String[] {null, "SOMETHING_NEW"}) {
        StepwellException se = Errors.decode(status(e.getKey(), reason));
        assertEquals(e.getValue(), se.getClass(), e.getKey() + " " + reason);
        assertEquals(e.getKey(), se.code());
        assertEquals(reason == null ? "" : reason, se.reason());
      }
      // a status without rich details at all
      assertEquals(e.getValue(), Errors.decode(Status.fromCode(e.getKey()).asRuntimeException()).getClass());
    }
  }

  @Test
  void badRequestGivesTheField() {
    Any bad =
        Any.pack(
            BadRequest.newBuilder()
                .addFieldViolations(
                    BadRequest.FieldViolation.newBuilder().setField("timeout").setDescription("d1"))
                .addFieldViolations(
                    BadRequest.FieldViolation.newBuilder().setField("name").setDescription("d2"))
                .build());
    StepwellException se = Errors.decode(status(Status.Code.INVALID_ARGUMENT, "INVALID_ARGUMENT", bad));
    assertInstanceOf(InvalidArgumentException.class, se);
    assertEquals("timeout", se.field());
    assertEquals(2, se.violations().size());
    assertEquals(new StepwellException.FieldViolation("name", "d2"), se.violations().get(1));
    assertEquals("INVALID_ARGUMENT INVALID_ARGUMENT (field timeout): m", se.getMessage());
  }

  @Test
  void waitSettledCarriesTheWinner() {
    Wait w = Wait.newBuilder().setTurnId("t").setName("n").build();
    StepwellException se =
        Errors.decode(
            status(
                Status.Code.ALREADY_EXISTS,
                "WAIT_SETTLED",
                Any.pack(WaitSettled.newBuilder().setWait(w).build())));
    WaitSettledException ws = assertInstanceOf(WaitSettledException.class, se);
    assertEquals(w, ws.getWait());
    assertFalse(ws.payloadOmitted());
    WaitSettledException dropped =
        assertInstanceOf(
            WaitSettledException.class, Errors.decode(status(Status.Code.ALREADY_EXISTS, "WAIT_SETTLED")));
    assertTrue(dropped.payloadOmitted());
  }

  @Test
  void aLostConnectionIsUnavailable() {
    StepwellException se =
        Errors.decode(Status.UNKNOWN.withCause(new IOException("reset")).asRuntimeException());
    assertInstanceOf(UnavailableException.class, se);
    assertEquals(Status.Code.UNAVAILABLE, se.code());
    // CANCELLED that the caller did not ask for: a peer reset the stream
    assertInstanceOf(UnavailableException.class, Errors.decode(Status.CANCELLED.asRuntimeException()));
    assertEquals(
        Status.Code.UNKNOWN, Errors.decode(Status.UNKNOWN.asRuntimeException()).code());
  }

  @Test
  void publicFromIsTheDecoder() {
    StatusRuntimeException e = status(Status.Code.ABORTED, "LEASE_LOST");
    assertEquals(Errors.decode(e).getClass(), StepwellException.from(e).getClass());
    StepwellException se = Errors.decode(e);
    assertSame(se, Errors.decode(se));
  }
}
