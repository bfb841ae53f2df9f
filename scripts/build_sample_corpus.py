#!/usr/bin/env python3
"""Regenerate the two procedurally composed documents of the bundled sample corpus.

Writes, under ``wildtrace/data/sample/corpus/``:

* ``kestrel_moor_incident_report.txt`` -- a fictional interim investigation report on
  an overpressure event at a made-up district heating plant (English, about 95 KB).
* ``halcyon_reach_log.txt`` -- the fictional log of a made-up brigantine on a passage
  between invented ports (English, about 50 KB).

Both texts are original. The narrative passages are written out below; the routine
material (alarm journal, historian extract, work orders, shift logs, the ship's daily
entries) is composed from templates with a fixed-seed generator, so that the output is
byte-for-byte identical on every run and every platform. The numbers that the sample
tasks in ``wildtrace/data/sample/tasks.json`` rely on (crossing times of the two
pressure transmitters, the ship's water account) are computed here and checked with
assertions, so an edit that breaks a task's ground truth fails loudly.

The other sample documents (the short story, the Chinese narrative and the cooler
maintenance log) are hand-written files in the same folder; this script leaves them
alone.

Usage::

    python scripts/build_sample_corpus.py            # write both files
    python scripts/build_sample_corpus.py --check    # exit 1 if the files on disk differ

Standard library only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "wildtrace" / "data" / "sample" / "corpus"
INCIDENT_FILE = "kestrel_moor_incident_report.txt"
SHIPLOG_FILE = "halcyon_reach_log.txt"


class Rng:
    """A tiny linear congruential generator: stable across Python versions, unlike hash()."""

    def __init__(self, seed: int) -> None:
        self.state = seed & 0x7FFFFFFF

    def _next(self) -> int:
        self.state = (1103515245 * self.state + 12345) & 0x7FFFFFFF
        return self.state >> 8

    def randint(self, low: int, high: int) -> int:
        return low + self._next() % (high - low + 1)

    def choice(self, seq):
        return seq[self._next() % len(seq)]

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * (self._next() / float(1 << 23))


def paragraphs(text: str) -> str:
    """Dedent a block of hand-written text: strip each line, keep blank lines."""
    return "\n".join(line.strip() for line in text.strip("\n").splitlines())


def interp(points: list[tuple[float, float]], t: float) -> float:
    """Piecewise-linear interpolation through (t, value) points; flat beyond the ends."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def clock(seconds_after_three: int) -> str:
    """03:MM:SS for a number of seconds after 03:00:00."""
    return f"03:{seconds_after_three // 60:02d}:{seconds_after_three % 60:02d}"


# ---------------------------------------------------------------------------------------
# Kestrel Moor: the pressure model behind the historian extract.
#
# PT-306 reads the true TA-1 pressure (2 s damping, negligible). PT-305 reads the same
# pressure through a first-order lag of 240 s, the damping left in it after calibration.
# The narrative's times are the crossing times of this model; main() asserts them.
# ---------------------------------------------------------------------------------------

DAMPING_S = 240
TRUE_PRESSURE = [  # seconds after 03:00:00, bar gauge
    (0, 9.05),
    (300, 9.08),  # B2 starts at 03:05
    (1440, 9.80),
    (2160, 9.98),  # BV-2 starts opening at 03:36; rise steepens to 0.2 bar/min
    (2376, 10.70),  # automatic trip at 03:39:36
    (2392, 11.00),  # PSV-12 lifts at 03:39:52
    (2424, 11.30),  # RD-3 bursts at 03:40:24
    (2440, 7.20),
    (2490, 5.60),
    (2580, 4.10),
    (2760, 2.90),
    (3000, 2.00),
]
EXPECTED = {
    "pt306_alarm": 1440,  # 03:24:00, PT-306 reaches 9.8 (bypassed, silent)
    "pt305_alarm": 1770,  # 03:29:30, PT-305 reaches 9.8, TA-1 PRESS HI
    "pt306_trip": 2226,  # 03:37:06, PT-306 reaches 10.2 (bypassed, silent)
    "pt305_trip": 2376,  # 03:39:36, PT-305 reaches 10.2, B1 and B2 trip
}


def pressure_model() -> tuple[list[float], list[float]]:
    """(true, PT-305) pressure at each second from 03:00:00 to 03:50:00."""
    true = [interp(TRUE_PRESSURE, t) for t in range(3001)]
    lagged, y = [], 8.98
    for x in true:
        y += (x - y) / DAMPING_S
        lagged.append(y)
    return true, lagged


def first_crossing(series: list[float], level: float) -> int:
    return next(t for t, v in enumerate(series) if v >= level - 1e-9)


INCIDENT_HEAD = """
ALDMERE ENERGY COOPERATIVE.
KESTREL MOOR DISTRICT HEATING PLANT.
INTERIM INVESTIGATION REPORT IR-2026-004.
Thermal accumulator TA-1 overpressure and release from rupture disc RD-3, Monday 9 February 2026.

Document control.
Revision B, issued 6 March 2026 for review by the Board Safety Committee.
Investigation lead: Helena Strand, Principal Process Safety Engineer.
Team members: Owen Castellane (control systems), Dr Miriam Achterberg (mechanical integrity), Lucia Ferrante (human \
factors), Sunil Rao (IT and OT infrastructure), and Gareth Pugh for the operators' union.
Status: interim. Findings are presented system by system. A consolidated causal analysis and the final recommendations \
will be issued in Revision C, after the responses of the vendor and the contractors have been received.
This report is fictional training material. The plant, the cooperative and every person named in it are invented.

1. Summary.

At 03:40 on Monday 9 February 2026 the rupture disc RD-3 on the thermal accumulator TA-1 at the Kestrel Moor District \
Heating Plant burst. About 38 cubic metres of pressurised hot water, part of which flashed to steam, discharged \
through the RD-3 tail pipe into the tundish and floor drain of the pump hall at level -1. The drain could not take the \
flow, and the pump hall flooded to a depth of about 40 centimetres. The two operators on duty, Dev Anand and Marta \
Szell, left the building without injury. The network circulation pumps NP-1 to NP-4 were stopped at 03:46 and the \
plant delivered no heat for 31 hours. About 4,200 dwellings, the annex of the Aldmere Community Hospital and two \
schools lost district heating during a spell of sub-zero weather. The hospital annex transferred to its standby \
boilers within 50 minutes. Supply was restored at 10:47 on Tuesday 10 February.

Nobody was hurt, and the investigation considers that this was fortunate. Had the field operator still been on the \
lower walkway beside the TA-1 base, where she had been seven minutes before the disc burst, she would have been within \
three metres of the tundish.

This interim report describes the plant and its protection (Section 3), the maintenance history of the equipment \
involved (Section 4), changes to the control and alarm system (Section 5), the sequence of events on the night \
(Section 6), the post-incident inspection (Section 7), the analysis of the pressure measurements (Section 8), the \
supporting information systems (Section 9) and the human-factors interviews (Section 10). Appendices A to F hold the \
supporting records.

2. Scope and method.

The investigation was commissioned by the plant manager, Tomas Brandt, at 07:30 on 9 February. The team secured the \
control system event logs, the data historian, the diagnostic files of the HeatPlan scheduler, the alarm journal, the \
permit-to-work records from October 2025 to February 2026, the management-of-change register and the contractors' \
calibration records. The physical evidence, including valve V-12A, relief valve PSV-12, the burst disc RD-3 and both \
pressure transmitters on TA-1, was kept under seal in the instrument workshop until the joint inspection of 13 \
February.

Eighteen interviews were held between 10 and 20 February. The team rebuilt the pressure and temperature trends at \
30-second resolution from the historian and compared them with the commissioning trip tests of 2019. Times in this \
report are control-system times. The control-system clock was checked against the national time signal on 9 February \
and found to be 4 seconds fast, and the times given here have been corrected.

The investigation follows the cooperative's procedure HSE-PR-017, which requires that people are not blamed for \
outcomes they could not reasonably have foreseen. Names are given only where they are needed to follow the events.

3. Facility and systems.

3.1 Plant overview.
Kestrel Moor supplies heat to the Aldmere network from two gas-fired hot-water boilers, B1 (rated 18 MW) and B2 (rated \
12 MW), and a pressurised thermal accumulator, TA-1. TA-1 is a vertical steel vessel of 2,400 cubic metres with a \
design pressure of 12.5 bar gauge. In normal operation it is held between 8.4 and 9.6 bar by a nitrogen cushion and by \
the charge rate of the boilers, and its pressure changes by no more than a few tenths of a bar in an hour. The \
accumulator lets the plant fire steadily through the night and release the stored heat into the network during the \
morning peak.

3.2 Pressure protection.
The protection of TA-1 against overpressure has three layers.
The first layer is the high-pressure trip. Two pressure transmitters, PT-305 and PT-306, are mounted on the top nozzle \
of TA-1, and each feeds the safety controller. The trip is arranged one-out-of-two: if either transmitter reads 10.2 \
bar or more, the safety controller closes the fuel valves of both B1 and B2. The same two transmitters raise the \
high-pressure alarm, which appears on the operator screens as TA-1 PRESS HI, at 9.8 bar.
The second layer is the pressure safety valve PSV-12, set at 11.0 bar. PSV-12 discharges through a silencer to the \
roof. It is sized to pass the full heat input of both boilers at maximum firing, so that with its inlet line open it \
can on its own hold TA-1 below 11.2 bar even if the boilers keep firing. Its inlet isolation valve, V-12A, is a gate \
valve that needs 15 turns of its handwheel to go from fully closed to fully open. V-12A is listed in the locked-valve \
register as locked open with padlock L-12, so that PSV-12 can be taken away for testing without draining the vessel.
The third layer is the rupture disc RD-3, rated to burst at 11.3 bar with a tolerance of plus or minus 0.15 bar. RD-3 \
is meant as the last resort. Its tail pipe discharges to a tundish in the pump hall at level -1, a design decision \
taken in 1998 when the accumulator was added to the original plant, which is addressed by Recommendation R9.
A local pressure gauge, PG-7, is fitted on the TA-1 base at the level -1 walkway. PG-7 is not connected to the control \
system and is read by the field operator on each round.

3.3 Thermal behaviour after a trip.
When the fuel valves close, the water in the boiler tubes and headers goes on delivering heat to the accumulator for \
about a minute. The commissioning trip tests of 2019 recorded a post-trip pressure rise in TA-1 of between 0.5 and 0.7 \
bar, with the peak coming 40 to 70 seconds after the fuel valves closed. The trip setpoint was chosen with this rise \
in mind: a trip at 10.2 bar is intended to leave TA-1 below the 11.0 bar set pressure of PSV-12, so that in an \
ordinary trip no relief device operates at all.

3.4 The HeatPlan scheduler.
The boiler firing rate and the charging of TA-1 are set by a supervisory scheduler, HeatPlan, supplied by Corvid \
Controls in 2022. HeatPlan forecasts the network demand for the next six hours from the outdoor air temperature and \
the time of day, and sets the boiler charge rate and the network supply temperature to match. HeatPlan takes the \
outdoor air temperature from a commercial weather feed run by Northgate Data Services, which it polls every 15 minutes \
over an encrypted connection. The plant also has its own outdoor thermometer on the boiler house roof, TT-900, whose \
value is recorded in the historian. HeatPlan does not use TT-900, for reasons set out in Section 9.
When the outdoor temperature it is given falls below -15 degrees C, HeatPlan enters a mode called Cold Reserve. In \
Cold Reserve it charges TA-1 towards the top of its pressure band, will start the second boiler if it needs more \
charge, and raises the supply temperature setpoint to 128 degrees C, in expectation of a severe morning peak.

3.5 Control room and field rounds.
At night the plant is run by two operators. The control room operator supervises the plant from the operator \
workstations. The field operator makes rounds of the boiler house, the pump hall and the water treatment room and \
carries a UHF radio. The shift supervisor is on call from home at night. Radio coverage in the pump hall at level -1 \
is poor. A radio survey in 2021 found a dead spot around the TA-1 base and the eastern drain pit, and another behind \
the boiler house wall on the stair landing, and it recommended an additional antenna, which had not been installed at \
the time of the incident.

4. Maintenance history.

4.1 The October 2025 overhaul.
The annual overhaul ran from 6 to 24 October 2025. Both boilers were out of service and TA-1 was held at reduced \
pressure on its nitrogen cushion. Sixty-one work orders were carried out. Those that matter to this report are \
summarised here; the work order history is in Appendix D.

4.2 PSV-12 bench test and valve V-12A.
On 14 October 2025 the mechanical crew led by fitter Callum Reyes removed PSV-12 for its three-yearly bench test under \
permit PTW-25-1187. To do this, V-12A was closed and padlock L-12 was removed by the area authority, who recorded the \
removal in the locked-valve register. PSV-12 passed its bench test in the valve workshop, lifting at 11.02 bar, and \
was refitted on 16 October.
The permit was signed off at 15:20 on 16 October with the box "isolations removed, system restored to normal line-up" \
ticked. The locked-valve register, however, has no entry for the refitting of L-12. The crew had been called away at \
15:05 that afternoon to a flange leak on the B1 feed header. Mr Reyes told the investigation that he believed his \
colleague had opened and locked V-12A while he finished the paperwork, and his colleague believed the reverse. Neither \
account can be checked. What is certain is that nobody recorded the valve being reopened, and that the missing lock \
was not noticed in the monthly locked-valve audits of November, December and January, because the audit sheet for the \
TA-1 top platform was the one sheet that was filled in from the register rather than by walking the plant. That habit \
went back to at least 2023, because reaching the TA-1 top platform requires a harness.

4.3 Calibration of PT-305 and PT-306.
On 20 October 2025 the transmitters PT-305 and PT-306 were calibrated by Joel Baptiste of the contractor Lindqvist \
Instrumentation under work order WO-25-3312. The calibration sheets are reproduced in Appendix C. The investigation \
draws attention to the handwritten remark on the PT-305 sheet, which is discussed in Section 8.

4.4 Heat tracing on the PT-306 impulse line.
The impulse line of PT-306 runs for about eight metres along the outside of the TA-1 insulation, where the wind \
reaches it through the louvres of the accumulator housing. In late November the electric heat tracing on this line \
began to fail. On cold nights the water in the line partly froze, and PT-306 gave erratic high readings, which caused \
the nuisance alarms described in Section 5. A replacement heat tracing set was ordered on 7 January 2026, was \
delivered on 22 January, and was installed and energised on 27 January under WO-26-0141. From then on PT-306 read \
normally. The historian shows it agreeing with PT-305 to within 0.05 bar on every steady night between 28 January and \
8 February.

5. Changes to the control and alarm system.

5.1 Nuisance alarms in December and January.
Between 2 December 2025 and 5 January 2026 the alarm journal records 47 occurrences of TA-1 PRESS HI that came from \
PT-306 while PT-305 read normally. On two of these occasions, 19 December and 3 January, PT-306 also passed 10.2 bar \
and tripped both boilers. The spurious trip of 3 January came at 05:10, just before the morning peak, and the network \
supply temperature fell to 96 degrees C before the boilers could be relit. The Aldmere Community Hospital made a \
formal complaint.
Operators from all four shift teams told the investigation that by the New Year the TA-1 PRESS HI alarm was "the one \
you cancel". Several described acknowledging it without looking at the trend. This is discussed in Section 10.

5.2 MOC-0117.
On 6 January 2026 the day shift supervisor, Ines Marlow, raised management-of-change request MOC-0117, "Temporary \
removal of PT-306 from TA-1 high-pressure alarm and trip pending heat tracing repair". It proposed that PT-306 be \
bypassed in the safety controller, so that the trip and the alarm would act on PT-305 alone, for a period stated on \
the form as "temporary, 14 days". The risk assessment on the form says that PT-305 "remains fully functional and \
calibrated (Oct 2025)" and that the trip therefore "remains available in 1oo1". The request was approved the same day \
by the operations manager, Rafael Okonkwo-Hale, and the bypass was applied in the safety controller at 16:40 on 6 \
January by the control systems technician on duty.
The MOC procedure requires that a temporary change is either removed or approved again by its expiry date, which for \
MOC-0117 was 20 January. Neither happened. The heat tracing was installed on 27 January, but the bypass stayed in \
place. The night shift log of 28 January records that the heat tracing had been energised and that MOC-0117 was "to be \
closed by day supervisor". Ms Marlow was on annual leave from 26 January to 9 February. The MOC register was not \
reviewed at the weekly operations meetings of 30 January and 6 February, because both meetings were cut short to deal \
with the hospital's complaint and with the gas supply contract. The bypass status of the safety controller was shown \
only on a maintenance screen that the operators do not normally display.
The historian went on recording PT-306 throughout, because the bypass acted only on the voting logic of the safety \
controller and not on the signal itself.

5.3 The 2022 HeatPlan integration.
When HeatPlan was commissioned in 2022, the functional design specification FDS-HP-004 required that "on loss of the \
external weather feed for more than 60 minutes, the scheduler shall revert to the plant outdoor temperature TT-900 and \
raise an operator alarm". The factory acceptance test recorded this item as "deferred, to be configured on site". The \
site acceptance test sheet for the item is blank. This is taken up in Section 9.

6. Sequence of events, 8 and 9 February 2026.

6.1 Conditions.
A cold spell had begun on 5 February. On the evening of Sunday 8 February the outdoor temperature at the plant, as \
measured by TT-900, fell steeply under a clear sky to -18.0 degrees C at 21:30, and then rose as cloud and a \
south-westerly wind arrived after midnight. It was -5.6 degrees C at 02:30 and -4.1 degrees C at 03:50.

6.2 Staffing.
The night shift took over at 18:00. The control room operator was Dev Anand, who has eleven years' experience at \
Kestrel Moor and was working the fifth of five consecutive night shifts. The field operator was Marta Szell, who \
joined the cooperative in 2024. The on-call supervisor was Nils Haverkamp, who was covering Ms Marlow's leave.

6.3 Evening.
The handover at 18:00 was normal. The handover sheet lists B1 in service at 70 percent, B2 on hot standby, TA-1 at 9.0 \
bar, and Cold Reserve "expected overnight". At 20:10 HeatPlan entered Cold Reserve as forecast and raised the supply \
temperature setpoint to 128 degrees C, and the charge rate of the boilers rose accordingly. The alarm journal for the \
evening, in Appendix A, holds only routine alarms.

At 22:40 HeatPlan received what turned out to be its last good reading from the Northgate feed. The value was -18.0 \
degrees C. The next poll, at 22:55, failed, and so did every poll after it that night; the cause is described in \
Section 9. HeatPlan wrote the failures to its diagnostic file, which operators do not see, and went on using the last \
value it had received. From then on the scheduler was planning for a morning at -18.0 degrees C while the real outdoor \
temperature climbed.

6.4 Early hours.
Between midnight and 03:00 the TA-1 pressure rose slowly from 8.8 to 9.05 bar. Network demand was falling as the \
weather turned milder, and the return temperature from the network rose from 61 to 67 degrees C, which meant that less \
heat was leaving the accumulator. HeatPlan, still preparing for a severe morning peak, kept calling for maximum \
charge. At 03:05 it started B2 automatically alongside B1, and B2 ramped to 95 percent firing by 03:20 and to full \
fire by 03:30.

At 03:17 Ms Szell began her scheduled round of the pump hall. At 03:21 she passed PG-7 and, as the round sheet \
requires, wrote down its reading, 9.7 bar.

At 03:24 PT-306 reached 9.8 bar. Because PT-306 was bypassed, no alarm was raised.

At 03:29:30 the TA-1 PRESS HI alarm sounded in the control room, raised by PT-305 reaching 9.8 bar. Mr Anand \
acknowledged it at 03:29:36. He did not open the TA-1 trend display. His account is given in Section 10.

At 03:33 Ms Szell, having checked the seals of the network pumps at the eastern end of the pump hall, came back past \
the TA-1 base and saw PG-7 reading, in her words, "just under ten, and I had written nine point seven twelve minutes \
before, and I knew the thing normally doesn't move that much in an hour". She called the control room on her radio \
twice. Neither call was received: the radio log shows no transmission reaching the repeater between 03:31 and 03:38. \
She decided to go up to the control room herself, which from the level -1 walkway means two flights of stairs and the \
boiler house corridor. On the way she stopped at the B2 burner front, where she saw that B2 was at full fire, and she \
tried the radio again from the stair landing at about 03:36, again without success.

At 03:36 the differential-pressure controller of the network began opening the bypass valve BV-2, because network \
demand had fallen further. BV-2 was 35 percent open by 03:37 and 60 percent open by 03:38:30. With BV-2 open, water \
came back to the plant warmer still, even less heat left TA-1, and the pressure in TA-1 began to rise much faster, at \
about 0.2 bar a minute.

At 03:37:06 PT-306 reached 10.2 bar. Because PT-306 was bypassed under MOC-0117, the safety controller did not act, \
and nothing was shown to the operators.

At 03:38 Ms Szell reached the control room and told Mr Anand what she had seen on PG-7. Mr Anand opened the TA-1 \
trend, which showed PT-305 at 10.03 bar. He told the investigation that the trend "looked wrong, far too smooth for a \
pressure that Marta said was climbing that fast", and that he spent most of the next minute finding the PT-306 value \
on the maintenance screen, where at about 03:39 he found it reading 10.6 bar beside a bypass flag he had not known \
about.

At 03:39:15 Mr Anand began reducing B2 by hand from the operator workstation. At 03:39:36, with B2 at about 85 \
percent, PT-305 reached 10.2 bar and the safety controller tripped B1 and B2. The TA-1 pressure recorded by PT-306 at \
that moment was 10.7 bar.

At 03:39:52 the acoustic monitor on the PSV-12 discharge detected PSV-12 lifting, which agrees with the PT-306 reading \
of 11.0 bar at that time. The pressure nevertheless went on rising; the reason is given in Section 7.

At 03:40:24 RD-3 burst, at a pressure recorded by PT-306 of 11.3 bar. The pump hall flood alarm and the pump hall \
temperature alarm sounded within ten seconds. Mr Anand and Ms Szell watched the pump hall camera fill with steam. At \
03:41 Mr Anand made the site evacuation announcement and both operators left by the north stair for the muster point \
at the gatehouse, from where they telephoned the on-call supervisor and the fire service.

6.5 After the release.
At 03:46 Mr Anand, having gone back to the control room at the direction of the on-call supervisor, who judged the \
control room to be safe, stopped the network pumps NP-1 to NP-4 to protect them from the flood water. The fire service \
arrived at 04:09 and confirmed at 04:35 that there was no fire and that the steam had cleared. Mr Haverkamp arrived on \
site at 04:20. The TA-1 pressure had fallen to about 2 bar by 03:50 as the accumulator emptied through RD-3.
The hospital annex transferred to its own boilers at 04:30. Temporary heat from the cooperative's mobile boiler units \
reached the two schools in the afternoon of 9 February. RD-3 was replaced, the pump hall was pumped out, and the \
network pumps were dried and tested. B1 was relit at 08:15 on 10 February and supply to the whole network was restored \
at 10:47.

7. Post-incident inspection.

7.1 Valve V-12A.
On 13 February the joint inspection team found the handwheel of V-12A three turns from fully closed, that is, about 20 \
percent open. Padlock L-12 was not on the valve. It was later found, locked shut on its own hasp with its tag still \
attached, in a drawer of the bench in the valve workshop where PSV-12 had been tested in October. The valve stem \
showed no sign of recent movement. The investigation concludes that V-12A had been in this position since 16 October \
2025, when PSV-12 was refitted.
A gate valve at 20 percent of its travel passes only a small fraction of its full flow. Using the valve maker's flow \
data, the team calculates that with V-12A three turns open PSV-12 could pass at most about a quarter of its rated \
capacity. PSV-12 therefore lifted at its correct set pressure but could not carry away enough of the heat that the \
boilers were still delivering after the trip.

7.2 Relief valve PSV-12.
PSV-12 was removed and bench-tested again on 16 February. It lifted at 11.03 bar and reseated normally. There was no \
sign of damage, sticking or a wrong setting. The discharge silencer and the roof vent were clear.

7.3 Rupture disc RD-3.
The burst disc was examined by the manufacturer's representative on 17 February. The rupture pattern was typical of a \
burst at the rated pressure. The manufacturer's records for the batch give a mean test burst pressure of 11.28 bar.

7.4 The transmitters.
PT-305 and PT-306 were removed on 13 February and checked on a test bench by a second contractor in the presence of \
the team. Both were within 0.02 bar of the reference over their whole range. The impulse line of PT-306 and its new \
heat tracing were in good condition. The configuration of PT-305, read out with a handheld communicator before \
removal, showed a damping time constant of 240 seconds. The instrument data sheet IDS-TA1-03 specifies 2 seconds for \
both transmitters. The damping of PT-306 was 2 seconds.

8. Analysis of the pressure measurements.

8.1 What damping does.
Damping is a filter in the transmitter's electronics that smooths its output. A damping time constant of 2 seconds \
removes jitter without noticeably delaying the signal. A time constant of 240 seconds is the largest the Valdris PX-40 \
transmitter allows. With that setting the output follows a change of pressure only slowly, and during a steady rise it \
falls behind the true pressure by up to the rate of rise multiplied by four minutes.

8.2 How PT-305 came to be at 240 seconds.
Appendix C reproduces the PT-305 calibration sheet of 20 October 2025. Under "as left", the sheet lists zero, span and \
linearity checks, all within tolerance. In the remarks field Mr Baptiste wrote: "Damping set to 240 s during test to \
steady the reading on the bench hand pump (pump leaking). Reset to 2 s before reinstatement." The tick box beside it, \
"damping reset to spec", is not ticked. Mr Baptiste told the investigation that he was called to the water treatment \
room to look at a conductivity analyser before he had finished with PT-305, that when he came back he refitted the \
transmitter and signed the sheet, and he accepts that he may not have reset the damping. The procedure of Lindqvist \
Instrumentation does not require a configuration printout to be attached to the calibration sheet, and the \
cooperative's instrument engineer, who countersigned the sheets on 22 October, checked the as-left values but not the \
remarks.
The damping had no visible effect in normal operation, because the TA-1 pressure normally changes by only a few tenths \
of a bar in an hour. It would have shown only when the pressure moved quickly, as during a boiler start, and the \
investigation found no record that anyone noticed it.

8.3 The lag on 9 February.
The historian extract in Appendix B shows PT-305 and PT-306 side by side. Before 03:00 they agreed to within 0.08 bar. \
During the slower rise from 03:05 to 03:36, PT-305 lagged PT-306 by up to 0.15 bar. PT-306, which was accurate, \
reached the 9.8 bar alarm level at 03:24, five and a half minutes before PT-305 did. After BV-2 began to open at 03:36 \
the rise steepened to about 0.2 bar a minute, and the gap between the two transmitters widened to 0.5 bar by 03:39:36. \
PT-305 reached the 10.2 bar trip setpoint two and a half minutes after PT-306 had.

8.4 Observations.
The trip setpoint of 10.2 bar and the allowance for the post-trip rise described in Section 3.3 both assume that the \
transmitter in use shows the real pressure. On 9 February the only transmitter left in the trip voting showed a \
pressure well behind the real one. The investigation has not, in this interim report, modelled alternative sequences \
of events; the team notes only that the recorded values of both transmitters are given in Appendix B for anyone who \
wishes to do so.

9. Supporting information systems.

9.1 The Northgate weather feed.
HeatPlan's connection to the Northgate Data Services weather feed is secured by a client certificate, which Northgate \
issues for one year at a time. The certificate in use on 8 February had been issued on 8 February 2025 and expired at \
22:47 local time on 8 February 2026. The 22:40 poll, seven minutes earlier, succeeded. The 22:55 poll and every poll \
after it failed, with the error "certificate expired" in HeatPlan's diagnostic file.

9.2 Why the certificate was not renewed.
Until 31 January 2026 the plant's operational technology network was supported by an external contractor, Paul \
Ferreira, under a contract that the cooperative did not renew when it brought OT support in-house. Northgate sent a \
renewal reminder on 9 January to Mr Ferreira's contract address, and on 12 January he opened ticket INC-4471, "Renew \
Northgate client cert before 08/02", and assigned it to himself. He told the investigation that he had meant to do the \
renewal in his last week, but that the handover to the in-house team took all of that week. His remote access account \
was disabled at the end of 31 January, as planned. The ticket was moved to the in-house queue on 2 February with no \
due date and with its priority set to normal. The in-house team, which then had one engineer, had not opened it by 9 \
February.

9.3 What HeatPlan did without the feed.
Section 5.3 describes the requirement in FDS-HP-004 that HeatPlan revert to TT-900 after 60 minutes without the feed \
and raise an alarm. Because this had never been configured, HeatPlan behaved as the Corvid Controls software does by \
default: it held the last value received, -18.0 degrees C, for as long as the feed stayed down, and raised no alarm. \
Had the fallback been configured as specified, HeatPlan would have switched to TT-900 at about 23:55, when TT-900 read \
-11.3 degrees C, and Cold Reserve would have ended at the next scheduling cycle. The investigation has confirmed this \
behaviour on the Corvid Controls test system.
The historian shows the HeatPlan outdoor temperature input fixed at -18.0 degrees C from 22:40 until the plant was \
shut down, while TT-900 rose to -4.1 degrees C.

9.4 Other systems.
The data historian, the alarm journal and the event log of the safety controller all worked normally and were \
time-synchronised. The pump hall camera went on recording until 03:52, when its housing filled with condensation.

10. Human factors.

10.1 The control room operator.
Mr Anand told the investigation that he acknowledged the 03:29 alarm without looking at the trend because "that alarm \
had been going off all December and half of January, and the word in the control room was that it was the frozen line \
on 306. I honestly thought it was the same thing." He said he had not known that PT-306 was bypassed, nor that the \
alarm now came from PT-305. The change under MOC-0117 had been announced to the four shift teams by e-mail on 6 \
January, while Mr Anand was on rest days, and he says he did not read it. The e-mail did not say which transmitter the \
remaining alarm would come from.
Mr Anand was working the fifth of five twelve-hour night shifts, a pattern that complies with the cooperative's rules \
but is at their limit. The investigation's fatigue assessment puts the hour from 03:00 to 04:00 on a fifth consecutive \
night in the highest-risk band.

10.2 The field operator.
In the investigation's view Ms Szell acted exemplarily. She compared the gauge with her own earlier reading, \
recognised that the rise was abnormal, tried the radio repeatedly and then went to the control room in person rather \
than wait. Her round sheet, with the 03:21 entry of 9.7 bar, has been preserved. Her attempts to call the control room \
at about 03:33 and 03:36 did not reach the repeater, which is consistent with the dead spots found by the 2021 radio \
survey.

10.3 The on-call supervisor.
Mr Haverkamp was not contacted before the release and had no opportunity to intervene. He told the investigation that \
his handover from Ms Marlow had not mentioned that MOC-0117 was still open.

11. Interim recommendations.

R1. Close out or re-approve every open temporary change, and show the status of every bypass in the safety controller \
permanently on the operator overview screen. Owner: operations manager.
R2. Require every locked-valve audit to be made in the field, including on platforms that need a harness, and fit a \
permanent caged ladder to the TA-1 top platform. Owner: maintenance manager.
R3. Require the as-left configuration of every safety instrument, including its damping, to be printed from the \
communicator, attached to its calibration record and checked against the instrument data sheet before the instrument \
returns to service. Owner: instrument engineer.
R4. Configure and test the HeatPlan fallback to TT-900 and the loss-of-feed alarm required by FDS-HP-004. Owner: \
control systems lead.
R5. Enter every certificate and licence on which the plant's control systems depend in the asset register, with an \
owner and an expiry date, and raise an alarm 30 days before each expiry. Owner: IT and OT manager.
R6. Install the additional radio antenna recommended in 2021 for level -1 of the pump hall and the stair landing. \
Owner: plant manager.
R7. Review the TA-1 alarms so that each alarm tells the operator which instrument raised it. Owner: control systems \
lead.
R8. Review the night-shift pattern with the operators' union. Owner: human resources.
R9. Reroute the RD-3 tail pipe to a safe place outside the pump hall. Owner: engineering manager.
"""

CALIBRATION_PT305 = """
Calibration sheet, PT-305, TA-1 top nozzle pressure (trip and alarm).
Work order WO-25-3312. Date 20 October 2025. Technician J. Baptiste, Lindqvist Instrumentation.
Instrument Valdris PX-40, serial VX40-118237. Range 0 to 16 bar gauge. Output 4 to 20 mA.
As found: zero 4.01 mA, span 19.98 mA, within tolerance.
As left: zero 4.00 mA, span 20.00 mA, linearity at 25, 50 and 75 percent within 0.05 percent.
Damping per data sheet IDS-TA1-03: 2 s.
Remarks: Damping set to 240 s during test to steady the reading on the bench hand pump (pump leaking). Reset to 2 s \
before reinstatement.
Box "damping reset to spec": not ticked.
Signed J. Baptiste, 20 October 2025. Countersigned by the cooperative's instrument engineer, 22 October 2025.
"""

CALIBRATION_PT306 = """
Calibration sheet, PT-306, TA-1 top nozzle pressure (trip and alarm).
Work order WO-25-3312. Date 20 October 2025. Technician J. Baptiste, Lindqvist Instrumentation.
Instrument Valdris PX-40, serial VX40-118241. Range 0 to 16 bar gauge. Output 4 to 20 mA.
As found: zero 3.99 mA, span 20.02 mA, within tolerance.
As left: zero 4.00 mA, span 20.00 mA, linearity at 25, 50 and 75 percent within 0.05 percent.
Damping per data sheet IDS-TA1-03: 2 s. As left: 2 s.
Remarks: Impulse line heat tracing checked, supply present, no fault found at time of test.
Box "damping reset to spec": ticked.
Signed J. Baptiste, 20 October 2025. Countersigned by the cooperative's instrument engineer, 22 October 2025.
"""

INCIDENT_TAIL = """
Appendix F. Glossary and distribution.

1oo1 and 1oo2: one-out-of-one and one-out-of-two voting. In one-out-of-two voting, either of two instruments can trip \
the plant on its own.
Bar: all pressures in this report are gauge pressures.
Cold Reserve: the HeatPlan mode for severe cold, entered below -15 degrees C.
Damping: a filter time constant in a transmitter, which smooths and delays its output.
HeatPlan: the supervisory scheduler supplied by Corvid Controls.
MOC: management of change.
PG-7: the local pressure gauge at the base of TA-1.
PSV: pressure safety valve.
PTW: permit to work.
RD: rupture disc.
TA-1: the thermal accumulator.
TT-900: the plant's roof-mounted outdoor air thermometer.
Distribution: Board Safety Committee; plant manager; operations manager; maintenance manager; engineering manager; \
instrument engineer; control systems lead; IT and OT manager; operators' union; the four shift teams.
End of interim report IR-2026-004, Revision B.
"""


def historian_appendix() -> str:
    true, lagged = pressure_model()
    rows = sorted(set(range(0, 3001, 30)) | {2226, 2376, 2392, 2424})
    out = [
        "Appendix B. Historian extract, 9 February 2026, 03:00 to 03:50.",
        "",
        "Values are recorded every 30 seconds, with additional rows at the trip, at the lift of PSV-12 and at the "
        "burst of RD-3. "
        "PT-305 and PT-306 are in bar gauge. TT-900 is the plant's own outdoor thermometer and HeatPlan OAT is the "
        "outdoor temperature that HeatPlan was using. "
        "B1 and B2 are firing rates in percent and BV-2 is the opening of the network bypass valve in percent. "
        "Each row ends with a full stop so that it can be read as one line of the record.",
        "",
    ]
    for t in rows:
        p306, p305 = true[t], lagged[t]
        tt900 = -5.3 + 1.2 * t / 3000
        supply = interp([(0, 126.4), (1800, 128.0), (2376, 128.4), (2424, 127.9), (3000, 119.0)], t)
        ret = interp([(0, 67.0), (2160, 67.4), (2280, 69.6), (2424, 70.1), (3000, 70.1)], t)
        b1 = 82 if t < 2376 else 0
        b2 = 0 if t < 300 else round(interp([(300, 20), (1200, 95), (1800, 100), (2355, 100), (2375, 85)], t))
        if t >= 2376:
            b2 = 0
        bv2 = round(interp([(0, 0), (2160, 0), (2220, 35), (2310, 60), (2400, 70), (3000, 70)], t))
        note = ""
        if t == 2226:
            note = " PT-306 at trip setpoint, bypassed."
        elif t == 2376:
            note = " Safety controller trip of B1 and B2."
        elif t == 2392:
            note = " PSV-12 acoustic monitor: lift."
        elif t == 2424:
            note = " RD-3 burst indicator: open circuit."
        out.append(
            f"{clock(t)}. PT-305 {p305:.2f} bar; PT-306 {p306:.2f} bar; TT-900 {tt900:.1f} C; "
            f"HeatPlan OAT -18.0 C; supply {supply:.1f} C; return {ret:.1f} C; "
            f"B1 {b1} %; B2 {b2} %; BV-2 {bv2} %.{note}"
        )
    return "\n".join(out)


ROUTINE_ALARMS = [
    ("B1 FLUE O2 LOW", "2.1 %"),
    ("B1 FLUE O2 LOW", "2.3 %"),
    ("NETWORK DP LOW ZONE 3", "0.62 bar"),
    ("NETWORK DP LOW ZONE 5", "0.58 bar"),
    ("CONDENSATE TANK LEVEL LOW", "18 %"),
    ("WATER TREATMENT CONDUCTIVITY HIGH", "41 uS/cm"),
    ("MAKE-UP PUMP MP-2 START", "auto"),
    ("GAS BOOSTER GB-1 DISCHARGE PRESSURE LOW", "178 mbar"),
    ("FIRE PANEL FAULT ZONE 12", "detector dirty"),
    ("NP-2 BEARING TEMP HIGH", "71 C"),
    ("STACK CEMS COMMS FAULT", "cleared by retry"),
    ("DOSING PUMP DP-3 STROKE FAULT", "auto reset"),
    ("NITROGEN BANK PRESSURE LOW", "42 bar"),
    ("NETWORK MAKE-UP FLOW HIGH", "3.1 m3/h"),
    ("B1 FD FAN VIBRATION HIGH", "6.2 mm/s"),
    ("CHEMICAL STORE DOOR OPEN", "door contact"),
    ("UPS-2 ON BATTERY TEST", "weekly self-test"),
    ("ZONE 7 SUBSTATION COMMS LOST", "restored"),
    ("FUEL GAS METER PULSE FAULT", "cleared"),
    ("BOILER HOUSE AMBIENT TEMP LOW", "6 C"),
]


def alarm_appendix(rng: Rng) -> str:
    start = dt.datetime(2026, 2, 8, 18, 0, 0)
    end = dt.datetime(2026, 2, 9, 3, 28, 0)
    span = int((end - start).total_seconds())
    times = sorted(rng.randint(60, span) for _ in range(185))
    entries: list[tuple[dt.datetime, str]] = []
    for s in times:
        when = start + dt.timedelta(seconds=s)
        name, value = rng.choice(ROUTINE_ALARMS)
        ack = when + dt.timedelta(seconds=rng.randint(5, 70))
        clear = ack + dt.timedelta(seconds=rng.randint(20, 600))
        entries.append(
            (
                when,
                f"{when:%d %b %H:%M:%S}. {name} ({value}). Acknowledged {ack:%H:%M:%S} by D. Anand. "
                f"Cleared {clear:%H:%M:%S}.",
            )
        )
    fixed = [
        (dt.datetime(2026, 2, 8, 18, 0, 0), "08 Feb 18:00:00. Shift handover, night shift logged on: D. Anand (control "
                                            "room), M. Szell (field)."),
        (dt.datetime(2026, 2, 8, 20, 10, 0), "08 Feb 20:10:00. Event: HEATPLAN MODE COLD RESERVE. Supply setpoint 128 "
                                             "C. Not an alarm."),
        (dt.datetime(2026, 2, 9, 3, 5, 0), "09 Feb 03:05:00. Event: B2 AUTO START ON HEATPLAN DEMAND. Not an alarm."),
        (dt.datetime(2026, 2, 9, 3, 29, 30), "09 Feb 03:29:30. TA-1 PRESS HI (PT-305, 9.80 bar). Acknowledged 03:29:36 "
                                             "by D. Anand. Not cleared."),
        (dt.datetime(2026, 2, 9, 3, 39, 15), "09 Feb 03:39:15. Event: B2 FIRING RATE MANUAL (operator). Not an alarm."),
        (dt.datetime(2026, 2, 9, 3, 39, 36), "09 Feb 03:39:36. B1 TRIP TA-1 PRESS HH (PT-305, 10.20 bar). B2 TRIP TA-1 "
                                             "PRESS HH (PT-305, 10.20 bar). Acknowledged 03:39:40 by D. Anand."),
        (dt.datetime(2026, 2, 9, 3, 39, 52), "09 Feb 03:39:52. PSV-12 ACOUSTIC MONITOR LIFT. Acknowledged 03:39:58 by "
                                             "D. Anand."),
        (dt.datetime(2026, 2, 9, 3, 40, 24), "09 Feb 03:40:24. RD-3 BURST INDICATOR OPEN CIRCUIT. Not acknowledged."),
        (dt.datetime(2026, 2, 9, 3, 40, 29), "09 Feb 03:40:29. PUMP HALL FLOOD LEVEL HIGH. Not acknowledged."),
        (dt.datetime(2026, 2, 9, 3, 40, 33), "09 Feb 03:40:33. PUMP HALL TEMP HIGH (58 C). Not acknowledged."),
        (dt.datetime(2026, 2, 9, 3, 40, 41), "09 Feb 03:40:41. TA-1 PRESS LOW (PT-306, 7.2 bar). Not acknowledged."),
        (dt.datetime(2026, 2, 9, 3, 41, 10), "09 Feb 03:41:10. Event: SITE EVACUATION ANNOUNCEMENT (public address). "
                                             "Not an alarm."),
        (dt.datetime(2026, 2, 9, 3, 43, 2), "09 Feb 03:43:02. NP-3 MOTOR TERMINAL BOX WATER INGRESS. Not "
                                            "acknowledged."),
        (dt.datetime(2026, 2, 9, 3, 46, 0), "09 Feb 03:46:00. Event: NP-1, NP-2, NP-3, NP-4 STOPPED BY OPERATOR. "
                                            "Alarms acknowledged by D. Anand."),
    ]
    entries.extend(fixed)
    entries.sort(key=lambda e: e[0])
    head = [
        "Appendix A. Alarm journal, 8 February 2026 18:00 to 9 February 2026 03:46.",
        "",
        "The journal lists every alarm and selected events in the order recorded. Routine alarms are included so that "
        "the reader can judge the alarm load on the control room operator that night.",
        "",
    ]
    return "\n".join(head + [text for _, text in entries])


CAL_INSTRUMENTS = [
    ("TT-310", "network supply temperature", "0 to 160 C", "Kestrel TR-12"),
    ("TT-320", "network return temperature", "0 to 160 C", "Kestrel TR-12"),
    ("FT-201", "B1 water flow", "0 to 600 m3/h", "Orrin MagFlow 5"),
    ("FT-202", "B2 water flow", "0 to 400 m3/h", "Orrin MagFlow 5"),
    ("LT-101", "condensate tank level", "0 to 100 %", "Valdris LX-20"),
    ("PT-110", "gas booster discharge pressure", "0 to 400 mbar", "Valdris PX-10"),
    ("AT-410", "make-up water conductivity", "0 to 200 uS/cm", "Halden CondoLine"),
    ("PT-220", "network differential pressure", "0 to 6 bar", "Valdris PX-40"),
    ("TT-140", "B1 flue gas temperature", "0 to 400 C", "Kestrel TR-40"),
    ("AT-150", "B1 flue oxygen", "0 to 21 %", "Halden ZircoSense"),
]


def calibration_appendix(rng: Rng) -> str:
    parts = [
        "Appendix C. Calibration records, October 2025 overhaul.",
        "",
        "The two TA-1 pressure transmitter sheets are reproduced first, as written. The remaining sheets from the same "
        "work order group are summarised.",
        "",
        paragraphs(CALIBRATION_PT305),
        "",
        paragraphs(CALIBRATION_PT306),
        "",
    ]
    for wo, (tag, service, rng_text, model) in enumerate(CAL_INSTRUMENTS, start=3313):
        day = rng.randint(15, 23)
        err_found = rng.uniform(0.02, 0.4)
        err_left = rng.uniform(0.0, 0.05)
        parts.append(
            f"Calibration sheet, {tag}, {service}. Work order WO-25-{wo:04d}. Date {day} October 2025. "
            f"Instrument {model}, range {rng_text}. As found error {err_found:.2f} percent of span; "
            f"as left error {err_left:.2f} percent of span. Damping as left per data sheet. "
            f"Signed by the technician and countersigned by the cooperative's instrument engineer."
        )
        parts.append("")
    return "\n".join(parts).rstrip()


WO_ASSETS = [
    ("B1", ["burner head inspected and cleaned", "refractory repaired at the rear wall", "flame scanner replaced",
            "tube bank inspected, no defects", "fuel valve proving test passed"]),
    ("B2", ["burner head inspected and cleaned", "ignition electrode replaced", "flame scanner lens cleaned",
            "fuel valve proving test passed", "front door seal renewed"]),
    ("NP-1", ["mechanical seal replaced", "coupling alignment checked", "bearing grease renewed"]),
    ("NP-2", ["bearing temperature sensor replaced", "coupling alignment checked", "vibration survey, within limits"]),
    ("NP-3", ["motor insulation resistance tested", "mechanical seal inspected", "bearing grease renewed"]),
    ("NP-4", ["impeller inspected", "coupling guard refitted", "vibration survey, within limits"]),
    ("GB-1", ["gas booster belt replaced", "discharge non-return valve inspected"]),
    ("MP-2", ["make-up pump check valve replaced", "pressure switch tested"]),
    ("DP-3", ["dosing pump diaphragm replaced", "stroke sensor adjusted"]),
    ("BV-2", ["actuator stroke test passed", "positioner recalibrated"]),
    ("UPS-2", ["battery string load test passed", "cooling fan replaced"]),
    ("FD-1", ["forced draught fan damper linkage adjusted", "fan bearing grease renewed"]),
    ("CEMS", ["stack analyser span gas check", "sample line heater replaced"]),
    ("WT-1", ["softener resin topped up", "brine valve overhauled"]),
    ("FIRE", ["zone 12 detectors cleaned", "sounder circuit tested"]),
    ("HVAC-3", ["control room air handler filters changed", "fan belt replaced"]),
    ("N2-BANK", ["nitrogen bottle bank changed over", "regulator inspected"]),
]


def work_order_appendix(rng: Rng) -> str:
    reserved = {("25", 3290), ("25", 3301), ("25", 3312), ("25", 3655), ("26", 141)} | {
        ("25", n) for n in range(3313, 3323)
    }
    planned: list[tuple[dt.date, str, str, str]] = []
    for _ in range(70):  # the October overhaul
        day = dt.date(2025, 10, 6) + dt.timedelta(days=rng.randint(0, 18))
        asset, jobs = rng.choice(WO_ASSETS)
        planned.append((day, asset, rng.choice(jobs),
                        rng.choice(["mechanical", "electrical", "instrument", "mechanical", "contractor"])))
    for _ in range(55):  # routine work, November to February
        day = dt.date(2025, 11, 3) + dt.timedelta(days=rng.randint(0, 96))
        asset, jobs = rng.choice(WO_ASSETS)
        planned.append((day, asset, rng.choice(jobs),
                        rng.choice(["mechanical", "electrical", "instrument", "mechanical"])))
    planned.sort(key=lambda p: p[0])
    counters = {"25": 3100, "26": 2}
    rows: list[tuple[dt.date, str]] = []
    for day, asset, job, crew in planned:
        year = "25" if day.year == 2025 else "26"
        if year == "25" and day >= dt.date(2025, 11, 1) and counters["25"] < 3500:
            counters["25"] = 3500
        counters[year] += rng.randint(1, 3)
        while (year, counters[year]) in reserved:
            counters[year] += 1
        rows.append((day, f"WO-{year}-{counters[year]:04d}. {day:%d %b %Y}. {asset}: {job}. "
                          f"Craft: {crew}. Status: completed."))
    fixed = [
        (dt.date(2025, 10, 14), "WO-25-3290. 14 Oct 2025. PSV-12: removed for three-yearly bench test under permit "
                                "PTW-25-1187, inlet valve V-12A closed and padlock L-12 removed by the area authority. "
                                "Craft: mechanical, lead fitter C. Reyes. Status: completed 16 Oct 2025, valve "
                                "refitted, permit signed off 15:20."),
        (dt.date(2025, 10, 16), "WO-25-3301. 16 Oct 2025. B1 feed header: flange leak at the north end, gasket "
                                "renewed, crew called from PSV-12 refit at 15:05. Craft: mechanical. Status: "
                                "completed."),
        (dt.date(2025, 10, 20), "WO-25-3312. 20 Oct 2025. PT-305 and PT-306: calibration by Lindqvist Instrumentation, "
                                "technician J. Baptiste. Craft: contractor. Status: completed, sheets countersigned 22 "
                                "Oct 2025."),
        (dt.date(2025, 11, 27), "WO-25-3655. 27 Nov 2025. PT-306 impulse line heat tracing: intermittent fault "
                                "reported by night shift, supply fuse replaced, fault recurred. Craft: electrical. "
                                "Status: open, replacement set to be ordered."),
        (dt.date(2026, 1, 7), "WO-26-0141. 07 Jan 2026. PT-306 impulse line heat tracing: replacement set ordered. "
                              "Delivered 22 Jan 2026. Installed and energised 27 Jan 2026. Craft: electrical. Status: "
                              "completed 27 Jan 2026."),
    ]
    rows.extend(fixed)
    rows.sort(key=lambda r: r[0])
    head = [
        "Appendix D. Work order history, 6 October 2025 to 8 February 2026 (extract).",
        "",
        "The extract lists work orders on the boilers, the network pumps, the TA-1 instruments and relief devices, and "
        "the auxiliary systems. Work orders on buildings and vehicles are omitted.",
        "",
    ]
    return "\n".join(head + [text for _, text in rows])


SHIFT_REMARKS = [
    "Network demand steady, supply temperature on target.",
    "B1 O2 trim hunting slightly at low fire, reported to the instrument technician.",
    "Water treatment regeneration completed normally.",
    "Condensate tank level low briefly after make-up pump changeover, recovered.",
    "Nitrogen bank changed over from bank A to bank B.",
    "Fire panel zone 12 fault cleared after detector cleaned.",
    "Zone 7 substation lost comms for four minutes, restored without action.",
    "Gas booster running on GB-1, GB-2 on standby.",
    "Compressed air dryer changed over to the standby tower.",
    "Weekly UPS self-test completed, no faults.",
    "Pump hall round complete, NP-2 bearing a little warm, within limits.",
    "Accumulator discharge over the peak went normally.",
    "B2 held on hot standby throughout.",
    "Salt delivery for the softeners received and stored.",
    "Snow cleared from the gatehouse approach by the contractor.",
]


def shift_log_appendix(rng: Rng) -> str:
    out = [
        "Appendix E. Shift log extracts, 27 January to 8 February 2026.",
        "",
        "Entries are copied from the control room shift log. Day shifts run from 06:00 to 18:00 and night shifts from "
        "18:00 to 06:00.",
        "",
    ]
    teams = {"A": "D. Anand, M. Szell", "B": "K. Asante, R. Price", "C": "J. Weller, A. Moreau",
             "D": "F. Nouri, B. Calloway"}
    day = dt.date(2026, 1, 27)
    while day <= dt.date(2026, 2, 8):
        for shift in ("Day", "Night"):
            if shift == "Night":
                team = ("A" if dt.date(2026, 2, 4) <= day <= dt.date(2026, 2, 8)
                        else ("B" if day >= dt.date(2026, 1, 31) else "D"))
            else:
                team = "C" if day.toordinal() % 2 else "B" if day < dt.date(2026, 1, 31) else "D"
            picks = []
            while len(picks) < 3:
                remark = rng.choice(SHIFT_REMARKS)
                if remark not in picks:
                    picks.append(remark)
            tap = rng.uniform(8.5, 9.3)
            text = (f"{day:%d %b %Y}, {shift} shift, team {team} ({teams[team]}). "
                    f"TA-1 at {tap:.1f} bar at handover. " + " ".join(picks))
            if day == dt.date(2026, 1, 28) and shift == "Night":
                text += (" E&I report heat tracing on PT-306 impulse line energised yesterday and working, "
                         "PT-306 now agrees with PT-305. MOC-0117 to be closed by day supervisor.")
            if day == dt.date(2026, 1, 30) and shift == "Day":
                text += " Weekly operations meeting held, shortened, hospital complaint and gas contract only."
            if day == dt.date(2026, 2, 6) and shift == "Day":
                text += " Weekly operations meeting held, shortened, gas contract only."
            if day == dt.date(2026, 2, 8) and shift == "Night":
                text = (
                    f"{day:%d %b %Y}, Night shift, team A (D. Anand, M. Szell). Took over 18:00, B1 at 70 percent, B2 "
                    f"hot standby, TA-1 at 9.0 bar. "
                    "Cold Reserve expected overnight, entered 20:10. Evening round complete 21:50, nothing to report. "
                    "Midnight round complete 00:40, pump hall dry, PG-7 8.8 bar. No further entries before the "
                    "incident."
                )
            out.append(text)
        day += dt.timedelta(days=1)
    return "\n".join(out)


def build_incident_report() -> str:
    true, lagged = pressure_model()
    assert first_crossing(true, 9.8) == EXPECTED["pt306_alarm"], first_crossing(true, 9.8)
    assert first_crossing(lagged, 9.8) == EXPECTED["pt305_alarm"], first_crossing(lagged, 9.8)
    assert first_crossing(true, 10.2) == EXPECTED["pt306_trip"], first_crossing(true, 10.2)
    assert first_crossing(lagged, 10.2) == EXPECTED["pt305_trip"], first_crossing(lagged, 10.2)
    assert abs(lagged[2280] - 10.03) < 0.01, lagged[2280]  # 03:38, the trend Mr Anand opened
    assert abs(true[2340] - 10.58) < 0.02, true[2340]  # about 03:39, PT-306 on the maintenance screen
    rng = Rng(20260209)
    parts = [
        paragraphs(INCIDENT_HEAD),
        alarm_appendix(rng),
        historian_appendix(),
        calibration_appendix(rng),
        work_order_appendix(rng),
        shift_log_appendix(rng),
        paragraphs(INCIDENT_TAIL),
    ]
    return "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------
# Halcyon Reach: the water account behind the daily entries.
# ---------------------------------------------------------------------------------------

SHIP_START = dt.date(2001, 5, 4)  # only day and month are printed; the year is never shown
STARTING_WATER = 1080  # thirty casks of thirty-six gallons


def water_issue(day: int) -> int:
    """Gallons issued on a day at sea: the allowance in force that day."""
    if day <= 12:
        return 20  # fourteen souls at a gallon, six to the cook
    if day <= 32:
        return 21  # Davy Lusk found on day 13
    if day <= 35:
        return 14  # three quarts a man from day 33
    return 10  # two quarts a man from day 36


def water_tables() -> tuple[dict[int, int], dict[int, int]]:
    """(purser's account, true water) at the end of each day 1..48."""
    account, real = STARTING_WATER, STARTING_WATER
    acct, true = {}, {}
    for day in range(1, 49):
        issue = water_issue(day)
        account -= issue
        real -= issue
        if day == 22:  # three deck casks lost in the gale
            account -= 108
            real -= 108
        if 6 <= day <= 32:
            real -= 4  # green staves weeping, never entered
        elif day >= 33:
            real -= 1  # hoops driven, worst casks drawn first
        if 3 <= day <= 34:
            real -= 1  # Lusk at cask no. 19, about a gallon a night
        if day == 34:
            real -= 27  # the split spile: no. 19 drains into the bilge
        if day == 38:
            real += 60  # rain caught in the awnings
        acct[day], true[day] = account, real
    return acct, true


SHIP_HEAD = """
THE LOG OF THE BRIGANTINE HALCYON REACH.
Captain Oriel Tamsin, master. Owners Messrs Aske and Lamprey, of Port Ambry.
Passage from Port Ambry to Port Tallis in the Serrat Isles, by way of Gull Key.
Kept by the master, with the noon entries copied fair each evening from the slate.
This log is a work of fiction. The ship, her people and every port named in it are invented.

Ship's company as entered on the articles at Port Ambry, fourteen souls: Oriel Tamsin, master; Elias Corwen, mate; \
Tobiah Pell, second mate; Nathaniel Greave, purser; Samuel Ruck, carpenter; Abel Finch, cook; Hal Brannock, boatswain; \
Ned Oakes, Jonah Vell, Piet Sorensen, Walter Crane, Isaac Dunmore and Tom Reddy, seamen; Kit Marrow, boy.
Cargo: sailcloth in bales, ironmongery, and two hundred crates of lamp oil for the Serrat merchants.
The hold is stowed with the water casks in two tiers abaft the mainmast, the forward tier standing against the \
bulkhead of the cable tier, and the cargo forward and aft of them.
"""

SHIP_KEY = {
    1: ("Weighed at six in the morning from Port Ambry roads on the first of the ebb, with a light air from the "
        "north, and stood out past the Ness under topsails. The purser, Mr Greave, reports the water completed "
        "yesterday evening: thirty new casks of thirty-six gallons each, one thousand and eighty gallons in all, "
        "twenty-seven of them stowed in the hold and three, numbered 28, 29 and 30, lashed on deck at the break of "
        "the poop to be drawn last. He had the casks new from the cooper Jory Haldane of Tanner's Row at nine "
        "shillings the cask, against fourteen shillings at the chandlery, and I commended him for the saving, the "
        "owners being pressed this year. We intend to water again at Gull Key, some twenty-six days on, and so to "
        "the Serrat Isles."),
    2: ("Discharged the Ambry pilot off the Ness buoy at daybreak and gave him letters for the owners. Lost sight of "
        "the Ambry light at two in the morning watch."),
    3: ("Set the allowance of water at one gallon a man a day and six gallons a day to the cook for the coppers, "
        "twenty gallons in all, which Mr Greave will enter daily in his account of water issued. Read the articles "
        "to the people and set the watches."),
    5: ("Passed the Ambry whalers at anchor on the outer bank and exchanged signals with the Good Intent, who "
        "reports the bank fished out this season. The people in good health and spirits."),
    7: ("Mr Corwen and I had words over the stowage of the lamp oil, which he would have shifted aft to trim the "
        "ship by the stern. I let him have his way, and she steers the easier for it. He is a good seaman and knows "
        "these waters better than any man aboard."),
    11: ("Crossed the edge of the Ambry current in the forenoon watch; the sea changed from green to a deep blue in "
         "the space of a glass."),
    15: ("Davy Lusk set to work with the boatswain and shows himself handy aloft. Kit Marrow has taken him under his "
         "wing, and the two are thick as thieves."),
    19: """Ruck rove a new tiller rope, the old one being chafed where it leads round the sheave.""",
    25: ("Set Walter Crane's hand from the book, two fingers being broken, and splinted them with strips of a cigar "
         "box."),
    29: """Mr Corwen very quiet since Gull Key, and keeps the deck through his watch below without need.""",
    31: """Tom Reddy slipped from the fore-topsail yard into the top and was not hurt beyond a bruise.""",
    37: """Calm still. Released Lusk from irons. The people sit in the shade of the sails and speak little.""",
    39: ("Calm. The men's lips cracking. Allowed them to rinse their mouths with sea water and spit it out, but not "
         "to swallow it, and stood by the rail myself to see it done."),
    41: """Ned Oakes hooked a shark, and the people ate it gladly, though the salt of it made them the more thirsty.""",
    43: """Tacked ship nine times in the day and made twenty miles to windward of yesterday's position.""",
    44: """Jonah Vell's tongue so swollen he can hardly speak. Gave him his ration in spoonfuls through the day.""",
    45: """The wind veering at last into the east at sunset, and the people cheered when the yards were squared.""",
    46: ("A fair breeze from the east all day. Mr Corwen has the middle watch and walks the deck like a man with "
         "something on his mind."),
    9: ("The cook, Abel Finch, came aft this forenoon to say that the water drawn today from the casks in use tastes "
        "of tar and of green wood, and that the men's tea is spoiled by it. I tasted it and found it unpleasant but "
        "wholesome. Ordered the casks in use to be aired with the hatch off when the weather allows. Finch says the "
        "casks from the Ambry chandlery never tasted so, and that he will not answer for the soup."),
    13: ("At four bells in the forenoon watch the boy Kit Marrow, sent below for a coil of ratline stuff, came up "
         "from the cable tier crying that there was a dead man in it. It proved to be a live lad of perhaps fifteen "
         "years, very dirty and thin, who gives his name as Davy Lusk, of Port Ambry, and says he came aboard by the "
         "bow chains on the night before we sailed. He says he has lived these twelve days on biscuit stolen from "
         "the bread room and on what he could catch from the drip of the scuttlebutt. There being no port to put him "
         "into, I have entered him on the articles as a supernumerary at no wages, to work for his keep under the "
         "boatswain. The water issued is now twenty-one gallons a day. Mr Corwen was for flogging him, which I would "
         "not allow."),
    17: ("The carpenter, Samuel Ruck, having been in the hold to look at the pump well, reports that several of "
         "Haldane's casks are weeping at the chimes and along the staves, and he showed me a shaving from cask no. "
         "11 that is pale and sappy. He says the staves are green oak, never seasoned, and that they are shrinking "
         "as they dry in the warmth of the hold, so that the hoops slacken. He has driven the hoops on the six "
         "worst, nos. 7, 11, 12, 15, 21 and 24, and reckons their loss at no more than a quart or two a day between "
         "them. I judged this trifling and told Mr Greave that he need make no entry of it, his account being of "
         "water issued. Ruck asked leave to sound every cask with a rod, and I have told him to do it when the "
         "weather allows a man in the hold with a light."),
    21: ("The glass falling since the morning watch and the wind backing into the south-west with a long swell. Sent "
         "down the royal yards and got the storm sails ready on deck."),
    22: ("A hard gale from the south-west all the day, with a high sea. Hove to under a close-reefed main topsail "
         "and the fore-topmast staysail at four in the morning watch. At two bells in the forenoon a heavy sea came "
         "aboard over the lee quarter and carried away the lashings of the deck casks. Nos. 28 and 29 went "
         "overboard, and no. 30 was stove against the fife rail and lost its water into the scuppers, so that one "
         "hundred and eight gallons are gone at a stroke. Walter Crane had his hand crushed in trying to save no. "
         "30. Mr Greave has entered the loss in his account."),
    23: ("Found at daylight that the fore-topmast is sprung a little above the cap. Sent down the fore-topgallant "
         "mast, and set the carpenter to fish the topmast with two capstan bars and a stout woolding. Gale "
         "moderating by the afternoon."),
    24: """The carpenter still at the fore-topmast all day, so that the sounding of the casks is put off again.""",
    26: ("Sighted the high land of Gull Key at sunset, bearing south-west by west, distant about nine leagues. "
         "Shortened sail for the night so as to close the land at daylight."),
    27: ("Stood in at daylight for the anchorage of Gull Key. At ten in the forenoon a pilot boat came off to us "
         "with a yellow flag at her masthead. The pilot would not come aboard but lay off our quarter, and Mr "
         "Corwen, who has been into Gull Key before and speaks the patois of the place, went down into the main "
         "chains to talk with him. The wind being fresh off the land, I could not hear what passed between them. Mr "
         "Corwen reports that the pilot says the yellow fever is in the town, that three ships lie in quarantine, "
         "and that no ship may send a boat ashore. He urged strongly that we stand on for the Serrat Isles, which "
         "with the wind as it is he reckons twelve days' sail. He put it that twelve days at twenty-one gallons is "
         "two hundred and fifty-two gallons, and that we had four hundred and thirty-eight by the purser's account "
         "this morning, enough and to spare, whereas to lie here until the fever abates might cost us a month and "
         "the men's health besides. I agreed, and at noon bore away to the southward. I own I wondered that the "
         "pilot boat, when she left us, did not go back round the point to the town but made away for the west side "
         "of the island."),
    33: ("Mr Pell, who has taken over the sounding of the casks from the carpenter, came to me this forenoon with "
         "his slate. Sounding with a rod through the bung of every cask in the hold, he makes the water remaining "
         "174 gallons, against 312 gallons by Mr Greave's account, a shortfall of 138 gallons. Every one of "
         "Haldane's casks is weeping, not the six only, and there is slime in the bilge beneath the whole of the "
         "after tier. He also finds no. 19, in the forward tier against the cable tier bulkhead, lower than it "
         "should be by several gallons, though it has never been broached. I have cut the allowance to three quarts "
         "a man and the cook's to two gallons and three quarts, fourteen gallons a day in all, have ordered the hold "
         "scuttle locked and the key kept by myself, and have told the people plainly how we stand. They took it "
         "quietly. From today the water is entered from Mr Pell's soundings, which he takes each forenoon in my "
         "presence, and Mr Greave's account is stopped."),
    34: ("The pumps at the change of the morning watch brought up water that was sweet to the taste, where the bilge "
         "is always foul and salt, and they went on bringing it up sweet all day. Ruck could not account for it and "
         "thinks we may have passed through a current of fresh water from some great river, which I doubt, there "
         "being no land within a hundred leagues."),
    35: ("In the middle watch Mr Pell, going down into the hold by way of the cable tier, there being no lock on "
         "that side, found Davy Lusk lying among the casks of the forward tier with a gimlet in his hand. Brought "
         "aft, he confessed as follows. On his third night aboard, the second night after we sailed, he worked a "
         "loose board at the back of the cable tier, bored a hole low down in cask no. 19 with a gimlet stolen from "
         "the carpenter's chest, and stopped it with a spile whittled from a chip of stave, and he has drunk from it "
         "every night since, about a gallon a night by his own reckoning, both before he was found and after. Two "
         "nights ago the spile split in the hole and he could not stop it, and the water ran out into the bilge all "
         "that night and the day after: whence the sweet water in the pumps. No. 19 now sounds at three gallons, "
         "where Mr Pell had it at thirty. I have put Lusk in irons for three days, though I own he has fared no "
         "better than the rest of us since the allowance was cut, and had the carpenter nail up the board."),
    36: ("Calm. The sea like oil and the sails hanging from the yards. Cut the allowance to two quarts a man and the "
         "cook's to two gallons and a half, ten gallons a day in all."),
    38: ("Still calm until four in the afternoon, when a heavy squall of rain came down upon us out of a black sky. "
         "Spread the awnings and the main course to catch it and led the water by canvas hoses into casks nos. 4 and "
         "7 and the harness cask, sixty gallons caught in all. Every man drank his fill from the first that ran off "
         "the awnings, and I would not grudge it them."),
    40: ("Isaac Dunmore and the boy Kit Marrow light-headed from the heat and the short allowance. Gave them the "
         "shade of the cabin skylight in the afternoon."),
    42: ("A light air at last, but from the south-west, dead foul for Serrat. Tacked ship every watch and made "
         "little of it."),
    47: ("This evening Mr Corwen asked to speak with me in the cabin and made a statement, which I set down as near "
         "to his words as I can. The pilot at Gull Key told him that the fever was in the town on the east side, but "
         "that the watering place at Sallow Creek, on the lee side of the island, was clear of it, and that ships "
         "were watering there under the pilot's direction without any communication with the shore. He did not tell "
         "me this. Four years ago, when second mate of the Pennant, he struck a clerk of the harbour master at Gull "
         "Key in a quarrel over port dues and ran from a fine he could not pay, and the pilot knew his face and told "
         "him there was a warrant still. He feared that if we went in to Sallow Creek he would be taken. He says "
         "that he believed the purser's account, that he did not know what Haldane's casks had done to us until Mr "
         "Pell's sounding, and that he has not slept since. I have told him that I shall put the matter before the "
         "owners, and that he will keep his berth until we reach Port Tallis, since I cannot work the ship without "
         "him. He wept."),
    48: ("At daybreak the peak of Serrat Grande in sight, bearing south by east. Stood in with a fair breeze and "
         "anchored in Port Tallis at four in the afternoon in nine fathoms. Water remaining at anchor, by Mr Pell's "
         "sounding, seventeen gallons in the last cask."),
}

SHIP_HARBOUR = {
    49: ("At anchor, Port Tallis. Took the boats to the spring at the head of the harbour at first light and filled "
         "the good casks. Bought thirty seasoned casks of the Tallis cooperage at sixteen shillings the cask and "
         "filled them, one thousand and eighty gallons, which the cooper here says is the last of his oak from the "
         "old stock. Every man given a full gallon at noon."),
    50: ("At anchor, Port Tallis. Landed the sailcloth and the ironmongery. The Serrat merchants took delivery of "
         "the lamp oil and made no complaint of the two leaking crates."),
    51: ("At anchor, Port Tallis. Mr Corwen left the ship by his own wish and with my letter to the owners, and has "
         "taken a passage home in the schooner Lark. Mr Pell to act as mate. Davy Lusk has asked to stay in the ship "
         "as ordinary seaman, and the boatswain speaks well of him, so I have entered him at half wages."),
    52: ("At anchor, Port Tallis. Broke up Haldane's casks for firewood for the galley. Ruck says that not a stave "
         "among them had seen a summer's seasoning, and that a cooper who sold such casks for a voyage ought to be "
         "made to drink from them. So ends this passage."),
}

WINDS_TRADE = ["NE", "NE by E", "ENE", "E by N", "E", "NE by N"]
WINDS_LATE = ["SE", "SE by E", "ESE", "E", "SE by S"]
WEATHER_FAIR = [
    "fine clear weather",
    "fair weather with passing cloud",
    "fine weather, a little hazy towards the horizon",
    "cloudy in the forenoon, clearing after noon",
    "fine and warm, a long easy swell",
    "fair, with a few light showers in the night",
]
SHIP_WORK = [
    "the watch employed tarring down the fore rigging",
    "setting up the lee shrouds and backstays",
    "scraping and oiling the masts",
    "making spun yarn and sennit",
    "overhauling the running gear",
    "the carpenter caulking the deck seams about the main hatch",
    "the boatswain at work on the old fore-topsail",
    "painting the jolly boat",
    "washing down and holystoning the decks",
    "putting chafing gear on the main rigging",
    "airing the sails and the bedding",
    "picking oakum",
    "serving the topmast backstays",
    "blacking the yards",
    "rattling down the main rigging",
]
SHIP_REMARKS = [
    "A school of porpoises played under the bows through the afternoon watch.",
    "Flying fish came aboard in the night, and the cook fried them for the cabin.",
    "Sighted a sail on the lee bow at daybreak, a barque standing to the northward; she did not speak us.",
    "*Kit Marrow is learning to box the compass and did it today without fault.",
    "Read divine service on the quarterdeck.",
    "Compared the chronometer with the deck watch; they agree within four seconds.",
    "Observed the sun at noon, and the latitude agrees well with the reckoning.",
    "*A booby settled on the fore-topsail yard and let Ned Oakes take it by hand.",
    "Phosphorescence very bright in the wake during the middle watch.",
    "Piet Sorensen played his fiddle in the dog watches.",
    "The boatswain reports the new manila running gear stretching more than he expected.",
    "*Overhauled the medicine chest and replaced a cracked bottle from the spare stock.",
    "Much weed in the sea, of a yellow colour.",
    "Caught a dolphin fish on a hook towed astern.",
    "*Jonah Vell and Tom Reddy quarrelled at dinner over a knife, and the mate settled it.",
    "The barometer steady all day.",
    "A swell from the south-west all night, though the wind was light.",
    "A shark followed the ship from noon until dusk.",
    "*Aired the cabin stores and found two cheeses spoiled.",
    "A halo round the moon at midnight.",
    "A whale blew close aboard on the weather beam.",
    "Marked the lead line afresh and stretched it.",
    "A clear sky and a great show of stars in the first watch.",
    "*Inspected the lamp oil in the fore hold; two crates weeping oil, restowed on their ends.",
    "*Hal Brannock shaved the boy for the first time, to the great amusement of the watch.",
    "The mate and the second mate took lunar distances together and agree on the longitude.",
    "A pair of petrels kept company with the ship all day, skimming the wake.",
    "Got the spare topsail up on deck and aired it.",
    "The people's clothes washed and hung in the rigging to dry.",
    "*Piet Sorensen cut the boy's hair with the galley shears.",
    "Evening quiet; the watch below singing forward.",
    "*The cat kittened in the sail locker, four kittens, all doing well.",
    "Wound the chronometer at noon as usual.",
    "*Found a rat's nest in the bread room and cleared it out.",
    "The sea very regular and the ship easy.",
    "A light drizzle through the morning watch, clearing at noon.",
]
WATCH_NOTES = {
    "fair": [
        "steady breeze, all sail drawing",
        "set the fore-topmast studding sail",
        "took in the royals for a squall and set them again",
        "breeze freshening, hauled up the mainsail",
        "moderate and clear",
        "light rain for half an hour",
        "trimmed the yards to a shift of wind",
        "nothing remarkable",
    ],
    "calm": [
        "calm, the ship boxing the compass",
        "a cat's-paw from the north that died away",
        "calm, braced the yards round for an air that never came",
        "calm and very hot",
        "calm, the sails slatting against the masts",
    ],
    "foul": [
        "tacked ship",
        "wind heading us, went about",
        "short head sea, the ship pitching",
        "wore ship at two bells",
        "light and baffling, tacked twice",
    ],
}


def ship_conditions(day: int, rng: Rng) -> tuple[str, str, str, int]:
    """(wind, weather, sail, miles run) for a day at sea."""
    if day <= 2:
        return (rng.choice(["N", "N by W"]) if day == 2 else "N", "light airs and fine", "all plain sail",
                rng.randint(55, 90))
    if day <= 20:
        return (rng.choice(WINDS_TRADE), rng.choice(WEATHER_FAIR),
                rng.choice(["all plain sail to royals", "all plain sail",
                            "all sail to royals and the fore-topmast studding sail"]),
                rng.randint(138, 181))
    if day == 21:
        return "SW", "overcast and squally, the glass falling", "double-reefed topsails", rng.randint(96, 112)
    if day == 22:
        return "SW", "a hard gale and a high sea", "a close-reefed main topsail, hove to", rng.randint(28, 40)
    if day == 23:
        return ("WSW", "gale moderating, a heavy sea still running", "reefed topsails, fore-topgallant mast sent down",
                rng.randint(55, 70))
    if day <= 26:
        return (rng.choice(["W", "W by N", "WNW"]), "moderate and cloudy",
                "topsails and courses, the fore-topmast fished", rng.randint(104, 138))
    if day == 27:
        return "W", "fresh off the land, fine", "topsails and courses", rng.randint(36, 48)
    if day <= 35:
        return (rng.choice(WINDS_LATE), rng.choice(WEATHER_FAIR),
                rng.choice(["all plain sail", "topsails, courses and topgallant sails"]), rng.randint(118, 152))
    if day <= 41:
        return (rng.choice(["calm", "calm, with light airs from the eastward", "calm, with cat's-paws now and then"]),
                rng.choice(["hot and sultry", "very hot, the sky white with haze", "hot, with heavy dew at night"]),
                "all sail set to catch what air there was", rng.randint(4, 28))
    if day <= 45:
        return (rng.choice(["SW", "SSW", "S by W"]),
                rng.choice(["fine, a short head sea", "cloudy, a short head sea", "fair, the wind dead foul"]),
                "beating under all plain sail", rng.randint(38, 71))
    return rng.choice(["E", "ESE", "E by N"]), rng.choice(WEATHER_FAIR), "all plain sail", rng.randint(118, 140)


def sick_list(day: int) -> str:
    sick = []
    if 22 <= day <= 31:
        sick.append("Walter Crane, crushed hand")
    if 35 <= day <= 37:
        sick.append("Davy Lusk in irons, not sick")
    if 39 <= day <= 47:
        sick.append("Isaac Dunmore and Kit Marrow, weak from the short allowance")
    if 43 <= day <= 47:
        sick.append("Jonah Vell, swollen tongue")
    return "; ".join(sick) if sick else "none"


def build_ships_log() -> str:
    acct, true = water_tables()
    assert acct[26] == 438 and acct[32] == 312 and true[32] == 174, (acct[26], acct[32], true[32])
    assert true[33] + 0 == 158 and true[34] == 115, (true[33], true[34])
    assert true[48] == 17, true[48]
    rng = Rng(18470504)
    entries = [paragraphs(SHIP_HEAD)]
    used_once: set[str] = set()
    for day in range(1, 53):
        date = SHIP_START + dt.timedelta(days=day - 1)
        head = f"Day {day}. {date.day} {date:%B}."
        if day in SHIP_HARBOUR:
            entries.append(head + " " + SHIP_HARBOUR[day])
            continue
        wind, weather, sail, run = ship_conditions(day, rng)
        course = (rng.choice(["SSW", "S by W", "SW by S", "S"]) if day < 27
                  else rng.choice(["S by E", "SSE", "S", "SE by S"]))
        work_a = rng.choice(SHIP_WORK)
        work_b = rng.choice([w for w in SHIP_WORK if w != work_a])
        kind = "calm" if 36 <= day <= 41 else "foul" if 42 <= day <= 45 else "fair"
        watches = "" if day in (21, 22, 23) else " ".join(
            f"{name} watch: {rng.choice(WATCH_NOTES[kind])}." for name in ("First", "Middle", "Morning")
        )
        lines = [
            head,
            f"Wind {wind}; {weather}. Under {sail}. Course made good {course}; distance run noon to noon {run} miles.",
            *([watches] if watches else []),
            f"Ship's work: {work_a}, and {work_b}."
            if day not in (21, 22, 23)
            else "Ship's work: all hands securing the deck and working the ship.",
            "Pumps "
            + (
                "sounded at 9 inches, and pumped out every hour."
                if day == 34
                else "kept going every glass, the ship labouring."
                if day in (22, 23)
                else f"sounded at {rng.randint(2, 5)} inches and pumped out each watch."
            ),
        ]
        if day <= 32:
            lines.append(f"Water issued {water_issue(day)} gallons; remaining by account {acct[day]:,} gallons.")
        else:
            lines.append(f"Water issued {water_issue(day)} gallons; remaining by sounding {true[day]} gallons.")
        baro = 30.05 + rng.uniform(-0.08, 0.1) if day not in (21, 22, 23) else {21: 29.71, 22: 29.38, 23: 29.62}[day]
        heat = rng.randint(70, 76) + (8 if 36 <= day <= 41 else 0) + (3 if day > 27 else 0)
        lines.append(f"Noon: barometer {baro:.2f} inches; thermometer {heat} degrees in the shade.")
        lines.append(f"Sick list: {sick_list(day)}.")
        remark_count = 0 if day in (21, 22, 23, 33, 34, 35, 47) else 1 if day in SHIP_KEY else 3
        picked: list[str] = []
        while len(picked) < remark_count:
            remark = rng.choice(SHIP_REMARKS)
            if remark in picked or remark in used_once:
                continue
            if remark.startswith("*"):
                used_once.add(remark)
            picked.append(remark)
        picked = [r.lstrip("*") for r in picked]
        if day in SHIP_KEY:
            lines.append(SHIP_KEY[day])
        if picked:
            lines.append(" ".join(picked))
        entries.append("\n".join(lines))
    return "\n\n".join(entries) + "\n"


def documents() -> dict[str, str]:
    return {INCIDENT_FILE: build_incident_report(), SHIPLOG_FILE: build_ships_log()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files on disk instead of writing")
    args = parser.parse_args(argv)
    status = 0
    for name, text in documents().items():
        path = CORPUS / name
        data = text.encode("utf-8")
        if args.check:
            same = path.exists() and path.read_bytes() == data
            print(f"{'ok     ' if same else 'DIFFERS'} {path} ({len(data):,} bytes)")
            status |= 0 if same else 1
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"wrote {path} ({len(data):,} bytes, {len(text):,} chars)")
    return status


if __name__ == "__main__":
    sys.exit(main())
